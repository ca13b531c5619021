//! What a page hands the client besides jobs (those are [`crate::job`]'s): the options of
//! `register` and the configuration of `configure`, read with the worker's JSON codec.

use sluice_shared::json::{self, FromJson, RawJson};
use sluice_shared::protocol::ProtocolError;

use crate::core::ClientError;

/// Options of `Sluice::register`; from JS, the `options` object. A member it does not know is
/// refused, so that a misspelt one is not dropped without a word. Only `json` reads it: its
/// `#[serde]` attributes are read by that derive alone.
#[derive(Clone, Debug, Default, PartialEq, FromJson)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterOptions {
    pub scope: Option<String>,
    /// `"classic"` (default) or `"module"`.
    #[serde(rename = "type")]
    pub worker_type: Option<String>,
    pub resend_after_ms: Option<f64>,
    pub keep_alive_ms: Option<f64>,
    pub control_timeout_ms: Option<f64>,
}

/// A page's configuration for `configure` (its JSON text), carried to the worker as the page
/// wrote it: the worker reads it, and refuses one it cannot read as a malformed request with
/// its reader's words (see `RawJson` for why the page client does not read it).
pub fn read_config(text: &str) -> Result<RawJson, ClientError> {
    json::from_str(text).map_err(|e| ClientError::Worker(ProtocolError::Malformed { message: e.0 }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shared::protocol::{decode_request, Envelope, Request};

    #[test]
    fn register_options_are_read_with_their_js_names() {
        let options: RegisterOptions =
            json::from_str(r#"{"scope":"/app/","type":"module","resendAfterMs":500}"#).unwrap();
        assert_eq!(
            options,
            RegisterOptions {
                scope: Some("/app/".into()),
                worker_type: Some("module".into()),
                resend_after_ms: Some(500.0),
                ..RegisterOptions::default()
            }
        );
        let empty: RegisterOptions = json::from_str(r#"{"scope":null}"#).unwrap();
        assert_eq!(empty, RegisterOptions::default());
    }

    #[test]
    fn bad_register_options_say_what_is_wrong() {
        let message = |text: &str| json::from_str::<RegisterOptions>(text).unwrap_err().0;
        assert_eq!(
            message(r#"{"scope":"/","keepAlive":5}"#),
            "unknown field `keepAlive`, expected one of `scope`, `type`, `resendAfterMs`, \
             `keepAliveMs`, `controlTimeoutMs`"
        );
        assert_eq!(
            message(r#"{"resendAfterMs":"soon"}"#),
            "invalid type: string \"soon\", expected f64"
        );
        assert_eq!(
            message("[]"),
            "invalid type: sequence, expected struct RegisterOptions"
        );
    }

    /// What the worker's handler answers to a configuration it cannot read: the reader's words
    /// as a malformed request (`sw` `worker/requests.rs`).
    fn workers_words(config: &RawJson) -> String {
        config
            .read::<sluice_shared::config::EngineConfig>()
            .expect_err("unreadable")
            .0
    }

    #[test]
    fn a_configuration_goes_to_the_worker_unread_and_the_worker_says_what_is_wrong() {
        for (config, words) in [
            ("null", "invalid type: null, expected struct EngineConfig"),
            ("[]", "invalid type: sequence, expected struct EngineConfig"),
            (r#"{"budgets":[{"name":1}]}"#, "invalid type: integer `1`"),
            (
                r#"{"retentionMs":-1}"#,
                "invalid value: integer `-1`, expected u64",
            ),
            (
                r#"{"budgets":[{"name":"a","algorithm":"leaky"}]}"#,
                "unknown variant `leaky`",
            ),
        ] {
            let raw = read_config(config).expect("any JSON goes");
            assert_eq!(raw.text(), config);
            let e = workers_words(&raw);
            assert!(e.starts_with(words), "{config}: {e}");
        }
        // Not JSON at all cannot happen from a page (it comes from `JSON.stringify`), and is
        // refused here with the reader's words.
        assert!(read_config("{").is_err());
    }

    #[test]
    fn a_readable_configuration_reaches_the_worker_as_the_page_wrote_it() {
        let page = r#"{"budgets":[{"name":"api","windows":[{"limit":10,"lengthMs":1000}],
            "matchPrefixes":["https://api.example/"],"targetUtilization":0.9}],
            "retentionMs":5000,"somethingNew":true}"#;
        let config = read_config(page).unwrap();
        let sent = json::to_string(&Envelope {
            request_id: "r".into(),
            request: Request::Configure {
                config: config.clone(),
            },
        });
        let as_the_worker_reads_the_page = match decode_request(&format!(
            r#"{{"requestId":"r","type":"configure","config":{page}}}"#
        )) {
            Ok(Envelope {
                request: Request::Configure { config },
                ..
            }) => config,
            other => panic!("{other:?}"),
        };
        assert_eq!(config, as_the_worker_reads_the_page);
        assert_eq!(
            decode_request(&sent).map(|e| e.request),
            Ok(Request::Configure { config })
        );
    }
}
