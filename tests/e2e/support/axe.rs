//! axe-core in a test page: its source (installed by `npm ci --prefix tests/e2e/js`) and its
//! injection, checked to work before anything is asked of it.

use std::path::PathBuf;

use super::{ci, report, PageScript, Tab};

/// axe-core's browser build, installed by `npm ci` in `tests/e2e/js` (.ci/run does it).
pub fn axe_source() -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/js/node_modules/axe-core/axe.min.js");
    match std::fs::read_to_string(&path) {
        Ok(source) => Some(source),
        Err(e) if ci() => panic!(
            "{}: {e}; .ci/run installs it with `npm ci --prefix tests/e2e/js`",
            path.display()
        ),
        Err(e) => {
            report(&format!(
                "SKIPPED the accessibility check: {}: {e}. Run `npm ci --prefix tests/e2e/js`.",
                path.display()
            ));
            None
        }
    }
}

/// Injects axe-core into the page and makes sure it runs and sees: a picture without a text
/// alternative, added for a moment, must be reported.
pub async fn inject_axe(tab: &Tab, source: &str) {
    tab.run_script(source).await;
    let caught: Vec<String> = tab
        .eval_as(
            "const img = document.createElement('img');\
             img.src = 'data:,'; img.id = 'axe-self-test';\
             document.body.append(img);\
             try {\
               const r = await axe.run('#axe-self-test', { runOnly: ['image-alt'] });\
               return r.violations.map((v) => v.id);\
             } finally { img.remove(); }",
        )
        .await;
    assert_eq!(caught, ["image-alt"], "axe did not work in the page");
}
