//! What an answer's body says about limits when its status and headers do not.
//!
//! Some APIs say "rate limited" only in the body: MediaWiki answers 200 with
//! `{"error": {"code": "ratelimited"}}`; others answer 429 with a JSON message that says the
//! limit in words ("Exceeded 2 calls per second"), or a 400 whose error type names the limit.
//! A budget's `bodyRules` say, per API, which status and which JSON value mean it, and where
//! the body gives a wait or the limit. Each rule reads one value by a dot path (`error.code`,
//! `errors.0.type`, `errors[0].type`); the first rule that matches decides.
//!
//! A rule can also say that the refusal is of **concurrency**, not rate (a server that refuses
//! requests beyond N open at once): that lowers the budget's in-flight cap for a while
//! (`concurrency_cap`) instead of pausing it.

use crate::config::{BodyMeaning, BodyRule, WaitUnit, Window};
use crate::headers::{Quota, ServerSignal};
use crate::json::{self, Json};
use crate::time::DurationMs;

impl BodyRule {
    /// Why this rule can never match, for the configuration check.
    pub fn problem(&self) -> Option<String> {
        if self.path.trim().is_empty() {
            return Some(
                "`path` is empty: name the JSON value that says it, e.g. `error.code`".into(),
            );
        }
        for (name, path) in [
            ("path", Some(&self.path)),
            ("waitPath", self.wait_path.as_ref()),
            ("limitPath", self.limit_path.as_ref()),
        ] {
            if let Some(p) = path {
                if let Err(e) = parse_path(p) {
                    return Some(format!("`{name}` '{p}': {e}"));
                }
            }
        }
        if self.limit_window_ms == Some(0) {
            return Some("`limitWindowMs` must be above 0".into());
        }
        None
    }

    /// Whether this rule matches an answer with `status` and the parsed `body`.
    fn matches(&self, status: u16, body: &Json) -> bool {
        if !self.status.is_empty() && !self.status.contains(&status) {
            return false;
        }
        let Some(value) = lookup(body, &self.path) else {
            return false;
        };
        match &self.equals {
            None => !matches!(value, Json::Null),
            Some(expected) => {
                scalar_text(value).is_some_and(|text| text.eq_ignore_ascii_case(expected.trim()))
            }
        }
    }

    fn wait_ms(&self, body: &Json) -> Option<DurationMs> {
        let value = lookup(body, self.wait_path.as_deref()?)?;
        let n = number(value)?;
        if !n.is_finite() || n < 0.0 {
            return None;
        }
        let ms = match self.wait_unit {
            WaitUnit::Seconds => n * 1000.0,
            WaitUnit::Milliseconds => n,
        };
        // A wait of more than a day in a body is a misread unit, not a wait.
        (ms <= 86_400_000.0).then(|| ms.ceil() as DurationMs)
    }

    fn limit(&self, body: &Json) -> Option<Window> {
        let value = lookup(body, self.limit_path.as_deref()?)?;
        match value {
            Json::Str(text) => limit_from_words(text)
                .or_else(|| window(text.trim().parse().ok()?, self.limit_window_ms?)),
            other => {
                let n = number(other)?;
                (n >= 1.0 && n <= f64::from(u32::MAX))
                    .then(|| window(n as u32, self.limit_window_ms?))
                    .flatten()
            }
        }
    }
}

fn window(limit: u32, length_ms: DurationMs) -> Option<Window> {
    (limit > 0 && length_ms > 0).then_some(Window { limit, length_ms })
}

/// What the first matching rule says of an answer, folded into the signal its headers gave:
/// rate limited (with the body's wait, unless a header already named one) and the limit the
/// body states, or a concurrency refusal. Returns whether a rule matched. A body that is not
/// JSON matches nothing.
pub fn apply_body_rules(
    rules: &[BodyRule],
    status: u16,
    body: &str,
    signal: &mut ServerSignal,
) -> bool {
    if rules.is_empty() {
        return false;
    }
    let Ok(parsed) = json::parse(body) else {
        return false;
    };
    let Some(rule) = rules.iter().find(|r| r.matches(status, &parsed)) else {
        return false;
    };
    match rule.means {
        BodyMeaning::Concurrency => {
            signal.concurrency_limited = true;
            signal.rate_limited = false;
        }
        BodyMeaning::RateLimited => {
            signal.rate_limited = true;
            if signal.retry_after_ms.is_none() {
                signal.retry_after_ms = rule.wait_ms(&parsed);
            }
            if let Some(w) = rule.limit(&parsed) {
                let quota = signal.quota.get_or_insert_with(Quota::default);
                if quota.windows.is_empty() {
                    quota.limit = quota.limit.or(Some(u64::from(w.limit)));
                    quota.window_ms = quota.window_ms.or(Some(w.length_ms));
                    quota.remaining = quota.remaining.or(Some(0));
                    quota.windows.push(w);
                }
            }
        }
    }
    true
}

/// Whether `path` is a dot path this module reads, and why not.
pub fn check_path(path: &str) -> Result<(), &'static str> {
    if path.trim().is_empty() {
        return Err("empty: name a JSON value, e.g. `usage.total_tokens`");
    }
    parse_path(path).map(|_| ())
}

/// The number at `path` in a parsed body (a JSON number or a numeric string).
pub fn read_number_at(body: &Json, path: &str) -> Option<f64> {
    number(lookup(body, path)?)
}

/// One step of a dot path: a member name or an array index.
#[derive(Debug, PartialEq, Eq)]
enum Step<'p> {
    Member(&'p str),
    Index(usize),
}

/// Reads `error.code`, `errors.0.type` and `errors[0].type`.
fn parse_path(path: &str) -> Result<Vec<Step<'_>>, &'static str> {
    let mut steps = Vec::new();
    for part in path.trim().split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => part.split_at(i),
            None => (part, ""),
        };
        if !name.is_empty() {
            steps.push(match name.parse::<usize>() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Member(name),
            });
        } else if rest.is_empty() {
            return Err("an empty step (two dots in a row, or a dot at an end)");
        }
        while !rest.is_empty() {
            let close = rest.find(']').ok_or("a `[` without its `]`")?;
            let index = rest[1..close]
                .trim()
                .parse::<usize>()
                .map_err(|_| "`[...]` must hold an array index, e.g. errors[0]")?;
            steps.push(Step::Index(index));
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return Err("text after `]`: write a dot before the next member");
            }
        }
    }
    Ok(steps)
}

/// The value at `path` in `body`, if there is one.
fn lookup<'j, 'a>(body: &'j Json<'a>, path: &str) -> Option<&'j Json<'a>> {
    let steps = parse_path(path).ok()?;
    steps.iter().try_fold(body, |value, step| match step {
        Step::Member(name) => value.get(name),
        Step::Index(i) => match value {
            Json::Arr(items) => items.get(*i),
            _ => None,
        },
    })
}

/// A scalar's text, as a person would write it to compare: strings as they are, numbers and
/// booleans as JSON writes them.
fn scalar_text(value: &Json) -> Option<String> {
    Some(match value {
        Json::Str(s) => s.trim().to_string(),
        Json::Bool(b) => b.to_string(),
        Json::U64(n) => n.to_string(),
        Json::I64(n) => n.to_string(),
        Json::F64(f) => json::display_f64(*f),
        Json::Null | Json::Arr(_) | Json::Obj(_) => return None,
    })
}

fn number(value: &Json) -> Option<f64> {
    match value {
        Json::U64(n) => Some(*n as f64),
        Json::I64(n) => Some(*n as f64),
        Json::F64(f) => Some(*f),
        // A numeric string is read by the JSON reader too: `str::parse::<f64>` would add
        // core's float parser to the worker (the JSON reader has its own; see `json`).
        Json::Str(s) => match json::parse(s.trim()).ok()? {
            Json::Str(_) => None,
            other => number(&other),
        },
        _ => None,
    }
}

/// A limit said in words: "100 requests per minute", "Exceeded 2 calls per second", "5000 per
/// hour", "10/s", "100 requests every 10 seconds", "1000 points per 60s". The first number
/// followed (within three words) by `per`, `every`, `/`, `a` or `an` and a time unit, with an
/// optional count of units between.
pub fn limit_from_words(text: &str) -> Option<Window> {
    let tokens = tokens(text);
    for (i, token) in tokens.iter().enumerate() {
        let Ok(limit) = token.parse::<u32>() else {
            continue;
        };
        for gap in 1..=4 {
            let Some(joiner) = tokens.get(i + gap) else {
                break;
            };
            if !matches!(
                joiner.to_ascii_lowercase().as_str(),
                "per" | "every" | "/" | "a" | "an"
            ) {
                continue;
            }
            if let Some(length_ms) = length_at(&tokens[i + gap + 1..]) {
                if let Some(w) = window(limit, length_ms) {
                    return Some(w);
                }
            }
            break;
        }
    }
    None
}

/// `second`, `10 seconds`, `60s`, `minute`, `1m`... at the start of `tokens`.
fn length_at(tokens: &[String]) -> Option<DurationMs> {
    let first = tokens.first()?;
    // "60s": a number and its unit written together.
    let digits = first.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && digits < first.len() {
        let n: u64 = first[..digits].parse().ok()?;
        return n.checked_mul(unit_ms(&first[digits..])?);
    }
    if let Ok(n) = first.parse::<u64>() {
        return n.checked_mul(unit_ms(tokens.get(1)?)?);
    }
    unit_ms(first)
}

fn unit_ms(word: &str) -> Option<DurationMs> {
    Some(match word.to_ascii_lowercase().as_str() {
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    })
}

/// Words and numbers, with `/` as a word of its own; other punctuation separates.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if c == '/' {
            out.push("/".into());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests;
