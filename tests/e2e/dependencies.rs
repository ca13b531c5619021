//! Issue 39, dependent jobs: a page creates a contact while offline, then edits and deletes
//! it before the create was sent, referring to the id the server will assign. The engine's side
//! (never sent early or with a reference, saved before sending, failures cascading, across
//! kills) is tested in `shared/tests/dependencies.rs`; here, the page client and the worker in
//! the browser against the demo API.

use serde_json::Value;

use crate::e2e;
use crate::support::{BrowserHarness, PageScript};

e2e!(
    /// Offline: create, edit (`PATCH /api/contacts/{{job:<create>.body.id}}`) and delete of one
    /// record. Nothing reaches the server; the edit and the delete show what they wait for.
    /// Online again: the server sees the create, the edit to the id it assigned, the delete,
    /// each once and in that order.
    an_offline_create_edit_and_delete_reach_the_server_with_its_id,
    90,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval("await e2e.configure();").await;
        h.set_worker_offline(true).await;
        let waiting: Value = tab
            .eval(
                r#"
                const create = await sluice.enqueue({ url: '/api/contacts', kind: 'create',
                  body: { name: 'Offline Ada' } });
                const id = sluice.ref(create.id, 'body.id');
                const edit = await sluice.enqueue({ url: '/api/contacts/' + id, method: 'PATCH',
                  kind: 'patch', body: { city: 'Paris', note: 'contact ' + id } });
                const remove = await sluice.enqueue({ url: '/api/contacts/' + id,
                  method: 'DELETE', after: [edit.id] });
                window.dependents = Promise.all([create.done, edit.done, remove.done].map(
                  (done) => done.then((o) => o.status, (e) => 'failed: ' + e.message)));
                const jobs = await sluice.jobs();
                const of = (job) => jobs.find((j) => j.id === job.id);
                return { ref: id, create: create.id, edit: of(edit), remove: of(remove) };
                "#,
            )
            .await;
        let create_id = waiting["create"].as_str().unwrap_or_default();
        assert_eq!(waiting["ref"], format!("{{{{job:{create_id}.body.id}}}}"), "{waiting}");
        assert_eq!(waiting["edit"]["state"], "queued", "{waiting}");
        assert_eq!(waiting["edit"]["waitingFor"], serde_json::json!([create_id]), "{waiting}");
        let remove_waits: Vec<String> =
            serde_json::from_value(waiting["remove"]["waitingFor"].clone()).unwrap_or_default();
        assert_eq!(remove_waits.len(), 2, "the edit, and the create it refers to: {waiting}");
        tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
        assert_eq!(h.api.total(), 0, "nothing may reach the server while offline");

        h.set_worker_offline(false).await;
        h.dispatch_sync("sluice", false).await;
        let statuses = tab.eval("return await window.dependents;").await;
        assert_eq!(statuses, serde_json::json!([201, 200, 204]), "{statuses}");

        let contact_requests: Vec<(String, String)> = h
            .api
            .arrivals()
            .into_iter()
            .filter(|a| a.path.starts_with("/api/contacts"))
            .map(|a| (a.method, a.path))
            .collect();
        let created = h.api.applied_creates_by_key();
        assert_eq!(created.values().sum::<usize>(), 1, "{created:?}");
        assert_eq!(contact_requests.len(), 3, "{contact_requests:?}");
        assert_eq!(contact_requests[0], ("POST".into(), "/api/contacts".into()));
        let path = &contact_requests[1].1;
        let new_id: u64 = path
            .strip_prefix("/api/contacts/")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("the edit went to {path}, not to the new id"));
        assert_eq!(contact_requests[1].0, "PATCH");
        assert_eq!(h.api.patches_of(new_id), 1);
        assert_eq!(contact_requests[2], ("DELETE".into(), path.clone()));
        assert!(h.api.contacts().is_empty(), "the contact was deleted");
    }
);
