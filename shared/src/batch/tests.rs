use super::shapes::{batch_body, relative_url, split_answer, BatchItem, ItemAnswer};
use super::*;

fn rule(shape: BatchShape, url: &str, endpoint: &str) -> BatchRule {
    BatchRule {
        method: "PATCH".into(),
        url: url.into(),
        endpoint: endpoint.into(),
        shape,
        ..BatchRule::default()
    }
}

fn item<'a>(url: &'a str, body: Option<&'a str>, id: Option<&'a str>) -> BatchItem<'a> {
    BatchItem {
        method: "PATCH",
        url,
        headers: &[],
        body,
        id,
    }
}

#[test]
fn a_rule_takes_jobs_by_method_and_url_pattern() {
    let r = rule(
        BatchShape::Inputs,
        "/crm/contacts/:id",
        "/crm/contacts/batch/update",
    );
    assert_eq!(
        r.captures("patch", "https://api.example/crm/contacts/51"),
        Some(vec![("id".into(), "51".into())])
    );
    assert_eq!(
        r.captures("POST", "https://api.example/crm/contacts/51"),
        None
    );
    assert_eq!(
        r.captures("PATCH", "https://api.example/crm/contacts"),
        None
    );
    assert_eq!(
        r.captures("PATCH", "https://api.example/crm/contacts/51/notes"),
        None
    );
    // A query cannot be carried by an item of this shape.
    assert_eq!(
        r.captures("PATCH", "https://api.example/crm/contacts/51?x=1"),
        None
    );
    let absolute = rule(
        BatchShape::Array,
        "https://api.example/v1/items/:id",
        "/v1/items/batch",
    );
    assert!(absolute
        .captures("PATCH", "https://api.example/v1/items/3")
        .is_some());
    assert!(absolute
        .captures("PATCH", "https://other.example/v1/items/3")
        .is_none());
    assert_eq!(
        absolute
            .endpoint_for("https://api.example/v1/items/3")
            .as_deref(),
        Some("https://api.example/v1/items/batch")
    );
}

#[test]
fn a_rule_says_what_is_wrong_with_it() {
    assert!(BatchRule::default().problem().unwrap().contains("`method`"));
    let mut r = rule(BatchShape::Inputs, "/contacts/:key", "/contacts/batch");
    assert!(
        r.problem().unwrap().contains("idParam"),
        "{:?}",
        r.problem()
    );
    r.id_param = "key".into();
    assert_eq!(r.problem(), None);
    r.max_items = 0;
    assert!(r.problem().unwrap().contains("maxItems"));
}

#[test]
fn an_array_batch_carries_the_bodies_and_reads_results_in_order() {
    let r = rule(BatchShape::Array, "/c", "/c/batch");
    let items = [
        item("https://a.example/c", Some(r#"{"name":"a"}"#), None),
        item("https://a.example/c", Some(r#"{"name":"b"}"#), None),
        item("https://a.example/c", Some(r#"{"name":"c"}"#), None),
    ];
    let body = batch_body(&r, "https://a.example/c/batch", &items).unwrap();
    assert_eq!(body, r#"[{"name":"a"},{"name":"b"},{"name":"c"}]"#);
    let answer = r#"[{"status":201,"body":{"id":1}},{"status":503,"error":"busy"}]"#;
    let split = split_answer(&r, 200, answer, &items);
    assert_eq!(
        split[0],
        Some(ItemAnswer {
            status: 201,
            headers: vec![],
            body: r#"{"id":1}"#.into()
        })
    );
    assert_eq!(split[1].as_ref().map(|a| a.status), Some(503));
    assert!(split[1].as_ref().unwrap().body.contains("busy"));
    assert_eq!(
        split[2], None,
        "an item the answer leaves out is not taken as done"
    );
    // Plain results take the batch's status.
    let plain = split_answer(&r, 200, r#"[{"id":1},{"id":2},{"id":3}]"#, &items);
    assert!(plain
        .iter()
        .all(|a| a.as_ref().is_some_and(|a| a.status == 200)));
}

#[test]
fn an_inputs_batch_puts_the_id_in_and_matches_results_and_errors_by_it() {
    let r = rule(BatchShape::Inputs, "/c/:id", "/c/batch/update");
    let items = [
        item(
            "https://a.example/c/7",
            Some(r#"{"properties":{"n":"x"}}"#),
            Some("7"),
        ),
        item(
            "https://a.example/c/8",
            Some(r#"{"properties":{"n":"y"}}"#),
            Some("8"),
        ),
        item("https://a.example/c/9", None, Some("9")),
    ];
    let body = batch_body(&r, "https://a.example/c/batch/update", &items).unwrap();
    assert_eq!(
        body,
        r#"{"inputs":[{"id":"7","properties":{"n":"x"}},{"id":"8","properties":{"n":"y"}},{"id":"9"}]}"#
    );
    // As HubSpot answers a partial success: 207, failures naming their ids in context.ids.
    let answer = r#"{"status":"COMPLETE","results":[{"id":"9","properties":{}},{"id":7}],
        "errors":[{"status":"error","category":"OBJECT_NOT_FOUND","message":"no 8",
                   "context":{"ids":["8"]}}],"numErrors":1}"#;
    let split = split_answer(&r, 207, answer, &items);
    assert_eq!(split[0].as_ref().map(|a| a.status), Some(200));
    assert_eq!(split[1].as_ref().map(|a| a.status), Some(404));
    assert!(split[1].as_ref().unwrap().body.contains("no 8"));
    assert_eq!(split[2].as_ref().map(|a| a.status), Some(200));
}

#[test]
fn a_requests_batch_carries_whole_sub_requests_and_their_own_answers() {
    let r = BatchRule {
        method: "POST".into(),
        ..rule(BatchShape::Requests, "/v1/c", "/v1/$batch")
    };
    let headers = vec![
        ("Authorization".to_string(), "Bearer t".to_string()),
        ("Idempotency-Key".to_string(), "k1".to_string()),
    ];
    let items = [
        BatchItem {
            method: "POST",
            url: "https://g.example/v1/c?x=1",
            headers: &headers,
            body: Some(r#"{"n":1}"#),
            id: None,
        },
        BatchItem {
            method: "POST",
            url: "https://g.example/v1/c",
            headers: &[],
            body: Some("plain text"),
            id: None,
        },
    ];
    let body = batch_body(&r, "https://g.example/v1/$batch", &items).unwrap();
    assert_eq!(
        body,
        // Members in the writer's order (sorted, as serde_json's `Value`).
        r#"{"requests":[{"body":{"n":1},"headers":{"Content-Type":"application/json","Idempotency-Key":"k1"},"id":"1","method":"POST","url":"/c?x=1"},{"body":"plain text","headers":{"Content-Type":"text/plain"},"id":"2","method":"POST","url":"/c"}]}"#
    );
    let answer = r#"{"responses":[{"id":"2","status":429,"headers":{"Retry-After":"3"},"body":{"error":"slow down"}},
        {"id":"1","status":201,"body":{"id":5}}]}"#;
    let split = split_answer(&r, 200, answer, &items);
    assert_eq!(split[0].as_ref().map(|a| a.status), Some(201));
    let refused = split[1].as_ref().unwrap();
    assert_eq!(refused.status, 429);
    assert_eq!(refused.headers, vec![("Retry-After".into(), "3".into())]);
}

#[test]
fn sub_request_urls_are_relative_to_the_endpoints_directory() {
    let e = "https://g.example/v1.0/$batch";
    assert_eq!(
        relative_url(e, "https://g.example/v1.0/users/7?a=b#f").as_deref(),
        Some("/users/7?a=b")
    );
    assert_eq!(relative_url(e, "https://g.example/beta/users/7"), None);
    assert_eq!(relative_url(e, "https://other.example/v1.0/users/7"), None);
}

#[test]
fn an_unreadable_answer_says_nothing_of_any_item() {
    let r = rule(BatchShape::Array, "/c", "/c/batch");
    let items = [item("https://a.example/c", Some("{}"), None)];
    for text in ["", "not json", "{\"a\":1}", "[1"] {
        assert_eq!(split_answer(&r, 200, text, &items), vec![None], "{text}");
    }
}
