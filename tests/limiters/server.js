// A real express rate limiter in front of a counting backend, for the browser tests in
// tests/e2e/limiters.rs. Each limiter is configured as its own documentation shows; the
// backend (the test's own, on loopback) counts what gets through.
//
//   node server.js <limiter> <backend origin> [limit] [window ms]
//
// <limiter>:
//   erl-draft-8   express-rate-limit, standardHeaders: 'draft-8' (RateLimit + RateLimit-Policy)
//   erl-draft-7   express-rate-limit, standardHeaders: 'draft-7' (RateLimit: limit=, remaining=, reset=)
//   erl-legacy    express-rate-limit, legacyHeaders only (X-RateLimit-Limit/-Remaining/-Reset)
//   rlf           rate-limiter-flexible's RateLimiterMemory with the headers its README suggests
//
// It listens on 127.0.0.1 at a free port and prints `listening http://127.0.0.1:PORT` first;
// then one line per answered request, `answered STATUS METHOD PATH SECONDS` (Unix time, as
// nginx's $msec), which the test counts (a limiter's 429s never reach the backend).

'use strict';

const http = require('node:http');
const express = require('express');
const cors = require('cors');
const { rateLimit } = require('express-rate-limit');
const { RateLimiterMemory } = require('rate-limiter-flexible');

const [kind, backendOrigin, limitArg, windowArg] = process.argv.slice(2);
const limit = Number(limitArg || 20);
const windowMs = Number(windowArg || 1000);
if (!kind || !backendOrigin || !(limit > 0) || !(windowMs > 0)) {
  console.error('usage: node server.js <erl-draft-8|erl-draft-7|erl-legacy|rlf> <backend origin> [limit] [window ms]');
  process.exit(2);
}
const backend = new URL(backendOrigin);

const app = express();

// One line per answered request, preflights included (marked by their method).
app.use((req, res, next) => {
  res.on('finish', () => {
    const at = (Date.now() / 1000).toFixed(3);
    process.stdout.write(`answered ${res.statusCode} ${req.method} ${req.originalUrl} ${at}\n`);
  });
  next();
});

// CORS as the `cors` middleware's README shows for an API on another origin: allow the
// calling origin, expose the rate-limit headers (a cross-origin fetch sees none otherwise),
// answer preflights here with a long Max-Age, before the limiter: a preflight is not counted.
app.use(
  cors({
    origin: true,
    exposedHeaders: [
      'Retry-After',
      'RateLimit',
      'RateLimit-Policy',
      'RateLimit-Limit',
      'RateLimit-Remaining',
      'RateLimit-Reset',
      'X-RateLimit-Limit',
      'X-RateLimit-Remaining',
      'X-RateLimit-Reset',
      'Date',
    ],
    maxAge: 7200,
  }),
);

function expressRateLimit(headers) {
  // The README's example, with this test's window and limit; the memory store (the default).
  return rateLimit({ windowMs, limit, ...headers });
}

function rateLimiterFlexible() {
  // The README's basic example (`points` per `duration` seconds, by the client's address) and
  // its wiki's Express middleware, with the headers the README suggests. Retry-After goes on
  // the 429 only: on a success it would tell a client to wait that it need not.
  const opts = { points: limit, duration: windowMs / 1000 };
  const limiter = new RateLimiterMemory(opts);
  const headers = (r) => ({
    'X-RateLimit-Limit': opts.points,
    'X-RateLimit-Remaining': r.remainingPoints,
    'X-RateLimit-Reset': Math.ceil((Date.now() + r.msBeforeNext) / 1000),
  });
  return (req, res, next) => {
    limiter
      .consume(req.ip)
      .then((r) => {
        res.set(headers(r));
        next();
      })
      .catch((r) => {
        if (r instanceof Error) {
          next(r);
          return;
        }
        res.set(headers(r));
        res.set('Retry-After', String(r.msBeforeNext / 1000));
        res.status(429).send('Too Many Requests');
      });
  };
}

const limiters = {
  'erl-draft-8': () => expressRateLimit({ standardHeaders: 'draft-8', legacyHeaders: false }),
  'erl-draft-7': () => expressRateLimit({ standardHeaders: 'draft-7', legacyHeaders: false }),
  'erl-legacy': () => expressRateLimit({ standardHeaders: false, legacyHeaders: true }),
  rlf: rateLimiterFlexible,
};
if (!limiters[kind]) {
  console.error(`unknown limiter ${kind}; one of ${Object.keys(limiters).join(', ')}`);
  process.exit(2);
}
app.use('/api', limiters[kind]());

// What passes the limiter goes to the backend as it came (body streamed, Idempotency-Key
// kept); the answer comes back with the limiter's headers and this server's CORS, not the
// backend's own.
const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade']);
app.use('/api', (req, res) => {
  const headers = { ...req.headers, host: backend.host };
  delete headers.origin;
  const upstream = http.request(
    {
      host: backend.hostname,
      port: backend.port,
      method: req.method,
      path: req.originalUrl,
      headers,
      agent,
    },
    (answer) => {
      res.status(answer.statusCode);
      for (const [name, value] of Object.entries(answer.headers)) {
        if (HOP_BY_HOP.has(name) || name.startsWith('access-control-')) continue;
        res.setHeader(name, value);
      }
      answer.pipe(res);
    },
  );
  upstream.on('error', (e) => {
    if (!res.headersSent) res.status(502).send(`backend: ${e.message}`);
    else res.destroy(e);
  });
  req.pipe(upstream);
});

const server = app.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  process.stdout.write(`listening http://127.0.0.1:${port}\n`);
});
server.on('error', (e) => {
  console.error(`cannot listen: ${e.message}`);
  process.exit(1);
});
