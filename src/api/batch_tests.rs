//! The batch endpoints (`batch.rs`), driven through the router as `tests.rs` drives the rest, on
//! tokio's paused clock.

use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use serde_json::{json, Value};
use tokio::time::advance;

use super::tests::{app, limited, send, Res};
use super::*;

const JSON: (&str, &str) = ("content-type", "application/json");

async fn post(app: &Router, path: &str, body: &Value) -> Res {
    send(app, "POST", path, &[JSON], &body.to_string()).await
}

fn contacts(n: usize) -> Value {
    Value::Array((0..n).map(|i| json!({ "name": format!("c{i}") })).collect())
}

fn seeded(config: ApiConfig, n: usize) -> (Router, ApiHandle) {
    let (app, api) = app(config);
    let fields = json!({ "name": "seed" });
    api.seed_contacts(n, fields.as_object().expect("an object"));
    (app, api)
}

#[tokio::test(start_paused = true)]
async fn an_array_batch_creates_each_contact_as_a_single_post_would() {
    let (app, api) = app(limited(10, 1000));
    let r = post(
        &app,
        "/api/contacts/batch",
        &json!([{ "name": "Ada" }, { "name": "Bob" }, [1]]),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!([
            { "status": 201, "body": { "name": "Ada", "id": 1 } },
            { "status": 201, "body": { "name": "Bob", "id": 2 } },
            { "status": 400, "error": "body must be a JSON object" },
        ])
    );
    // One arrival, counted once, with the rate-limit headers of any answer.
    assert_eq!(r.header("x-ratelimit-remaining"), Some("9"));
    assert_eq!(api.contacts().len(), 2);
    assert_eq!((api.creates_named("Ada"), api.creates_named("Bob")), (1, 1));
    let a = api.arrivals();
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].batch_items, a[0].items_applied), (Some(3), 2));
    assert!(a[0].applied && a[0].admitted);
    let s = api.stats();
    assert_eq!(
        (s.total, s.batches, s.batch_items, s.batch_items_applied),
        (1, 1, 3, 2)
    );
}

#[tokio::test(start_paused = true)]
async fn a_hubspot_batch_update_patches_each_contact_and_the_single_patch_takes_its_body() {
    let (app, api) = seeded(limited(10, 1000), 2);
    let r = post(
        &app,
        "/api/contacts/batch/update",
        &json!({ "inputs": [
            { "id": "1", "properties": { "email": "one@x" } },
            { "id": 2, "properties": { "email": "two@x", "name": null } },
        ]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!({
            "status": "COMPLETE",
            "results": [
                { "id": "1", "properties": { "id": 1, "name": "seed", "email": "one@x" } },
                { "id": "2", "properties": { "id": 2, "email": "two@x" } },
            ],
            "numErrors": 0,
            "errors": [],
        })
    );
    assert_eq!((api.patches_of(1), api.patches_of(2)), (1, 1));

    // The same input sent alone: its HubSpot body applies the inner object.
    let r = send(
        &app,
        "PATCH",
        "/api/contacts/1",
        &[JSON],
        r#"{"properties": {"email": "uno@x"}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, json!({ "id": 1, "name": "seed", "email": "uno@x" }));
    assert_eq!(r.header("etag"), Some("\"v3\""));
    assert_eq!(api.patches_of(1), 2);
    // A plain patch with other fields beside `properties` still sets it as a field.
    let r = send(
        &app,
        "PATCH",
        "/api/contacts/2",
        &[JSON],
        r#"{"properties": {"a": 1}, "b": 2}"#,
    )
    .await;
    assert_eq!(r.body["properties"], json!({ "a": 1 }));
}

#[tokio::test(start_paused = true)]
async fn a_hubspot_batch_with_an_unknown_id_answers_207_naming_it() {
    let (app, api) = seeded(limited(10, 1000), 1);
    let r = post(
        &app,
        "/api/contacts/batch/update",
        &json!({ "inputs": [
            { "id": "1", "properties": { "email": "one@x" } },
            { "id": "99", "properties": { "email": "lost@x" } },
            { "id": "abc", "properties": {} },
        ]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS);
    assert_eq!(r.body["status"], "COMPLETE");
    assert_eq!(r.body["numErrors"], 2);
    assert_eq!(r.body["results"][0]["id"], "1");
    let errors = r.body["errors"].as_array().expect("errors");
    assert_eq!(
        errors[0],
        json!({
            "status": "error",
            "category": "OBJECT_NOT_FOUND",
            "message": "no such contact",
            "context": { "ids": ["99"] },
            "httpStatus": 404,
        })
    );
    assert_eq!(errors[1]["context"]["ids"], json!(["abc"]));
    assert_eq!(api.patches_of(1), 1);
    assert_eq!(api.arrivals()[0].items_applied, 1);
}

#[tokio::test(start_paused = true)]
async fn a_graph_batch_carries_out_each_sub_request_with_its_own_headers() {
    let (app, api) = app(limited(10, 1000));
    let batch = json!({ "requests": [
        { "id": "1", "method": "POST", "url": "/contacts",
          "headers": { "Content-Type": "application/json", "Idempotency-Key": "c1" },
          "body": { "name": "Ada" } },
        { "id": "2", "method": "PATCH", "url": "contacts/1", "dependsOn": ["1"],
          "headers": { "content-type": "application/json", "If-Match": "\"v1\"" },
          "body": { "email": "a@x" } },
        { "id": "3", "method": "PATCH", "url": "/contacts/1",
          "headers": { "Content-Type": "application/json", "If-Match": "\"v1\"" },
          "body": { "email": "stale@x" } },
        { "id": "4", "method": "GET", "url": "/contacts/7" },
        { "id": "5", "method": "DELETE", "url": "/contacts/1", "dependsOn": ["4"] },
        { "id": "6", "method": "GET", "url": "/contacts/1" },
    ]});
    let r = post(&app, "/api/$batch", &batch).await;
    assert_eq!(r.status, StatusCode::OK);
    let res = r.body["responses"].as_array().expect("responses");
    let ids: Vec<&str> = res.iter().filter_map(|x| x["id"].as_str()).collect();
    assert_eq!(ids, ["1", "2", "3", "4", "5", "6"], "in request order");
    assert_eq!(res[0]["status"], 201);
    assert_eq!(res[0]["headers"]["Location"], "/api/contacts/1");
    assert_eq!(res[0]["headers"]["Content-Type"], "application/json");
    assert_eq!(res[0]["body"], json!({ "name": "Ada", "id": 1 }));
    assert_eq!(res[1]["status"], 200);
    assert_eq!(res[1]["headers"]["ETag"], "\"v2\"");
    assert_eq!(res[2]["status"], 412, "its If-Match names the old version");
    assert_eq!(res[2]["body"]["current"]["email"], "a@x");
    assert_eq!(res[3]["status"], 404);
    assert_eq!(res[4]["status"], 424, "it depends on the 404");
    assert_eq!(
        res[5]["body"],
        json!({ "name": "Ada", "id": 1, "email": "a@x" })
    );
    assert_eq!(api.patches_of(1), 1);

    // The sub-request's key is the single request's: sent alone, it replays.
    let again = send(
        &app,
        "POST",
        "/api/contacts",
        &[JSON, ("idempotency-key", "c1")],
        r#"{"name":"Ada"}"#,
    )
    .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(api.creates_named("Ada"), 1);
    let a = api.arrivals();
    assert_eq!((a[0].batch_items, a[0].items_applied), (Some(6), 3));
}

#[tokio::test(start_paused = true)]
async fn more_than_100_items_refuse_the_whole_batch() {
    let (app, api) = seeded(limited(10, 1000), 1);
    let array = contacts(101);
    let inputs: Vec<Value> = (0..101)
        .map(|_| json!({ "id": "1", "properties": { "x": 1 } }))
        .collect();
    let requests: Vec<Value> = (0..101)
        .map(|i| json!({ "id": i.to_string(), "method": "GET", "url": "/contacts/1" }))
        .collect();
    for (path, body) in [
        ("/api/contacts/batch", array),
        ("/api/contacts/batch/update", json!({ "inputs": inputs })),
        ("/api/$batch", json!({ "requests": requests })),
    ] {
        let r = post(&app, path, &body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(
            r.body,
            json!({ "error": "a batch takes at most 100 items, got 101" }),
            "{path}"
        );
    }
    assert_eq!(api.contacts().len(), 1);
    assert_eq!(api.patches_of(1), 0);
    assert!(api
        .arrivals()
        .iter()
        .all(|a| !a.applied && a.batch_items.is_none()));
    // Exactly 100 is allowed.
    let r = post(&app, "/api/contacts/batch", &contacts(100)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(api.contacts().len(), 101);
}

#[tokio::test(start_paused = true)]
async fn a_malformed_batch_is_refused_whole_with_a_clear_message() {
    let (app, api) = seeded(limited(100, 1000), 1);
    let cases: &[(&str, &str, &str)] = &[
        ("/api/contacts/batch", "not json", "invalid JSON"),
        ("/api/contacts/batch", r#"{"name":"A"}"#, "JSON array"),
        ("/api/contacts/batch/update", r#"[{"id":"1"}]"#, "inputs"),
        (
            "/api/contacts/batch/update",
            r#"{"inputs":[{"id":"1","properties":{}},{"id":true,"properties":{}}]}"#,
            "inputs[1].id",
        ),
        (
            "/api/contacts/batch/update",
            r#"{"inputs":[{"id":"1","properties":[]}]}"#,
            "inputs[0].properties",
        ),
        ("/api/$batch", r#"{"requests":{}}"#, "requests"),
        (
            "/api/$batch",
            r#"{"requests":[{"id":"1","method":"GET"}]}"#,
            "requests[0].url",
        ),
        (
            "/api/$batch",
            r#"{"requests":[{"id":"1","method":"GET","url":"/x"},{"id":"1","method":"GET","url":"/y"}]}"#,
            "used twice",
        ),
        (
            "/api/$batch",
            r#"{"requests":[{"id":"1","method":"POST","url":"/contacts","body":{}}]}"#,
            "Content-Type",
        ),
        (
            "/api/$batch",
            r#"{"requests":[{"id":"1","method":"GET","url":"/x","dependsOn":["2"]}]}"#,
            "dependsOn",
        ),
        (
            "/api/$batch",
            r#"{"requests":[{"id":"1","method":"POST","url":"/contacts/batch"}]}"#,
            "cannot contain a batch",
        ),
        (
            "/api/$batch",
            r#"{"requests":[{"id":"1","method":"GET","url":"https://example.com/x"}]}"#,
            "relative to /api",
        ),
    ];
    for (path, body, says) in cases {
        let r = send(&app, "POST", path, &[JSON], body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path} {body}");
        let error = r.body["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{path} {body}: {error}");
    }
    assert_eq!(
        get_status(&app, "/api/contacts/batch").await,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(api.contacts().len(), 1, "nothing applied");
    assert_eq!(api.patches_of(1), 0);
}

async fn get_status(app: &Router, path: &str) -> StatusCode {
    send(app, "GET", path, &[], "").await.status
}

#[tokio::test(start_paused = true)]
async fn batch_item_fail_rate_fails_items_without_applying_them() {
    let (app, api) = seeded(
        ApiConfig {
            batch_item_fail_rate: 1.0,
            seed: Some(3),
            ..limited(100, 1000)
        },
        2,
    );
    let r = post(&app, "/api/contacts/batch", &contacts(3)).await;
    assert_eq!(r.status, StatusCode::OK);
    let all_503 = json!({ "status": 503, "error": "temporarily unavailable" });
    assert_eq!(r.body, json!([all_503, all_503, all_503]));

    let update = json!({ "inputs": [
        { "id": "1", "properties": { "x": 1 } },
        { "id": "2", "properties": { "x": 2 } },
    ]});
    let r = post(&app, "/api/contacts/batch/update", &update).await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS);
    assert_eq!(r.body["numErrors"], 2);
    assert_eq!(r.body["results"], json!([]));
    assert_eq!(r.body["errors"][1]["category"], "SERVICE_UNAVAILABLE");
    assert_eq!(r.body["errors"][1]["status"], "error");
    assert_eq!(r.body["errors"][1]["httpStatus"], 503);
    assert_eq!(r.body["errors"][1]["context"]["ids"], json!(["2"]));

    let graph = json!({ "requests": [
        { "id": "a", "method": "PATCH", "url": "/contacts/1",
          "headers": { "Content-Type": "application/json" }, "body": { "x": 1 } },
    ]});
    let r = post(&app, "/api/$batch", &graph).await;
    assert_eq!(r.body["responses"][0]["status"], 503);

    assert_eq!(api.contacts().len(), 2, "no create applied");
    assert_eq!((api.patches_of(1), api.patches_of(2)), (0, 0));
    let s = api.stats();
    assert_eq!((s.batches, s.batch_items, s.batch_items_applied), (3, 6, 0));
    // A batch whose every item failed changed nothing.
    assert_eq!(s.applied, 0);

    api.update_config(&ConfigPatch {
        batch_item_fail_rate: Some(0.0),
        ..Default::default()
    })
    .expect("valid");
    let r = post(&app, "/api/contacts/batch/update", &update).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["numErrors"], 0);
    let r = post(&app, "/api/contacts/batch", &contacts(3)).await;
    assert!(r
        .body
        .as_array()
        .expect("array")
        .iter()
        .all(|x| x["status"] == 201));
    assert_eq!(api.contacts().len(), 5);
    assert_eq!((api.patches_of(1), api.patches_of(2)), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn batch_sub_rate_limited_answers_the_next_sub_requests_429() {
    let (app, api) = app(limited(100, 1000));
    let r = send(
        &app,
        "POST",
        "/__sluice/config",
        &[],
        r#"{"batchSubRateLimited": 1}"#,
    )
    .await;
    assert_eq!(r.body["batchSubRateLimited"], 1);
    let create = |id: &str, name: &str| {
        json!({ "id": id, "method": "POST", "url": "/contacts",
                "headers": { "Content-Type": "application/json" }, "body": { "name": name } })
    };
    let batch = json!({ "requests": [create("1", "A"), create("2", "B"), create("3", "C")] });
    let r = post(&app, "/api/$batch", &batch).await;
    assert_eq!(r.status, StatusCode::OK);
    let res = &r.body["responses"];
    assert_eq!(res[0]["status"], 429);
    assert_eq!(res[0]["headers"]["Retry-After"], "1");
    assert_eq!(
        (res[1]["status"].as_u64(), res[2]["status"].as_u64()),
        (Some(201), Some(201))
    );
    assert_eq!(
        (
            api.creates_named("A"),
            api.creates_named("B"),
            api.creates_named("C")
        ),
        (0, 1, 1)
    );
    // Spent: the next batch's sub-requests all go through.
    assert_eq!(api.config().batch_sub_rate_limited, 0);
    let r = post(
        &app,
        "/api/$batch",
        &json!({ "requests": [create("1", "A")] }),
    )
    .await;
    assert_eq!(r.body["responses"][0]["status"], 201);
    assert_eq!(api.creates_named("A"), 1);

    // Staged counts are state that a reset forgets.
    api.update_config(&ConfigPatch {
        batch_sub_rate_limited: Some(5),
        ..Default::default()
    })
    .expect("valid");
    api.reset();
    assert_eq!(api.config().batch_sub_rate_limited, 0);
    let r = send(
        &app,
        "POST",
        "/__sluice/config",
        &[],
        r#"{"batchItemFailRate": 1.5}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body["error"]
        .as_str()
        .is_some_and(|e| e.contains("batchItemFailRate")));
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_one_arrival_against_the_limit() {
    let (app, api) = app(limited(1, 1000));
    let r = post(&app, "/api/contacts/batch", &contacts(5)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(api.contacts().len(), 5);

    advance(Duration::from_millis(500)).await;
    let r = post(&app, "/api/contacts/batch", &contacts(5)).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.body["retryAfterMs"], 500);
    assert_eq!(
        api.contacts().len(),
        5,
        "no item of the refused batch applied"
    );

    advance(Duration::from_millis(500)).await;
    let r = post(&app, "/api/contacts/batch", &contacts(5)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(api.contacts().len(), 10);
    let s = api.stats();
    assert_eq!((s.total, s.admitted, s.rate_limited), (3, 2, 1));
    assert_eq!((s.batches, s.batch_items, s.max_in_window), (2, 10, 1));
}

#[tokio::test(start_paused = true)]
async fn a_batch_repeated_with_its_key_is_replayed_not_applied_again() {
    let (app, api) = seeded(limited(100, 1000), 1);
    let key = [JSON, ("idempotency-key", "b1")];
    let update = json!({ "inputs": [
        { "id": "1", "properties": { "n": 1 } },
        { "id": "42", "properties": { "n": 2 } },
    ]})
    .to_string();
    let first = send(&app, "POST", "/api/contacts/batch/update", &key, &update).await;
    assert_eq!(first.status, StatusCode::MULTI_STATUS);
    let again = send(&app, "POST", "/api/contacts/batch/update", &key, &update).await;
    assert_eq!(again.status, StatusCode::MULTI_STATUS);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(api.patches_of(1), 1);

    let key = [JSON, ("idempotency-key", "b2")];
    let array = contacts(2).to_string();
    let first = send(&app, "POST", "/api/contacts/batch", &key, &array).await;
    let again = send(&app, "POST", "/api/contacts/batch", &key, &array).await;
    assert_eq!(
        (first.status, again.status),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(again.body, first.body);
    assert_eq!((api.creates_named("c0"), api.creates_named("c1")), (1, 1));
    // The same key on another batch path is a different request.
    let other = send(&app, "POST", "/api/$batch", &key, r#"{"requests":[]}"#).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);

    let a = api.arrivals();
    assert_eq!(a[1].outcome, Outcome::Replayed);
    assert_eq!((a[1].batch_items, a[1].items_applied), (None, 0));
    assert_eq!(api.stats().replays, 2);
}

#[tokio::test(start_paused = true)]
async fn the_stats_count_requests_sent_against_patches_applied_alone_or_batched() {
    let (app, api) = seeded(limited(100, 1000), 3);
    let key = [JSON, ("idempotency-key", "u1")];
    let update = json!({ "inputs": [
        { "id": "1", "properties": { "owner": "Maya" } },
        { "id": "2", "properties": { "owner": "Maya" } },
        { "id": "99", "properties": { "owner": "Maya" } },
    ]})
    .to_string();
    // Two items applied, one failed; the repeat is a replay, not two more changes.
    let first = send(&app, "POST", "/api/contacts/batch/update", &key, &update).await;
    assert_eq!(first.status, StatusCode::MULTI_STATUS);
    let again = send(&app, "POST", "/api/contacts/batch/update", &key, &update).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    // One PATCH alone, one refused (no such contact), and a read: requests, not changes.
    let body = r#"{"owner": "Jonas"}"#;
    let one = send(&app, "PATCH", "/api/contacts/3", &[JSON], body).await;
    assert_eq!(one.status, StatusCode::OK);
    let none = send(&app, "PATCH", "/api/contacts/98", &[JSON], body).await;
    assert_eq!(none.status, StatusCode::NOT_FOUND);
    assert_eq!(
        send(&app, "GET", "/api/contacts/1", &[], "").await.status,
        StatusCode::OK
    );

    let s = api.stats();
    assert_eq!(
        (s.total, s.batch_items_applied, s.patches_applied),
        (5, 2, 3)
    );
    let r = send(&app, "GET", "/__sluice/stats", &[], "").await;
    assert_eq!(
        (r.body["total"].clone(), r.body["patchesApplied"].clone()),
        (json!(5), json!(3))
    );
}
