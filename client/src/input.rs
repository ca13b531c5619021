//! What a page hands the client besides jobs (those are [`crate::job`]'s): the options of
//! `register` and the configuration of `configure`, read with the worker's JSON codec.

use sluice_shared::config::EngineConfig;
use sluice_shared::json::{self, FromJson};
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

/// A page's configuration for `configure` (its JSON text), read as the worker reads the
/// configuration in a request.
///
/// One the worker could not read it would refuse as a malformed request: this says exactly
/// what the worker would have said (same reader, same words, same code), so that pages see the
/// same error whichever end reads the configuration.
pub fn read_config(text: &str) -> Result<EngineConfig, ClientError> {
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

    /// What the worker answers to a request whose configuration it cannot read.
    fn workers_words(config: &str) -> ProtocolError {
        let text = format!(r#"{{"requestId":"r","type":"configure","config":{config}}}"#);
        match decode_request(&text) {
            Err((_, error)) => error,
            Ok(Envelope { request, .. }) => panic!("{config}: read as {request:?}"),
        }
    }

    #[test]
    fn a_configuration_the_worker_could_not_read_gets_the_workers_error() {
        for config in [
            "null",
            "[]",
            r#"{"budgets":[{"name":1}]}"#,
            r#"{"budgets":[{"name":"a","windows":[{"limit":1.5,"lengthMs":1}]}]}"#,
            r#"{"retentionMs":-1}"#,
            r#"{"budgets":[{"name":"a","algorithm":"leaky"}]}"#,
        ] {
            assert_eq!(
                read_config(config),
                Err(ClientError::Worker(workers_words(config))),
                "{config}"
            );
        }
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
