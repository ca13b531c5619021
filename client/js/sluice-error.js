
// ---- appended by Sluice's build (client/js/sluice-error.js) ----
// The class of every error the page client rejects with, so that page code can test
// `error instanceof SluiceError` and read its stable `code`. It lives in this module, after
// wasm-bindgen's glue, because the glue's imports name it (`new SluiceError(...)`, see
// `client/src/web.rs`): an ES module's top-level class is in scope for every function of the
// module, and the glue calls it only after the module has run.
export class SluiceError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'SluiceError';
    this.code = code;
  }
}
