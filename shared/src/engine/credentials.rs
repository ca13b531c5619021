//! Credentials: headers given for a budget (by a page with `setCredentials`, or by the worker
//! script's `credentials` function before each request), set over each job's own when it is
//! sent, and the budget's wait for new ones when the server refuses them.
//!
//! # Why a refusal holds the budget
//! A 401 (a status of the budget's `waitForCredentialsOn`) says nothing is wrong with the job
//! but the token. Retrying with the same token would only be refused again, in a loop, until
//! the job ran out of attempts and failed. So the job goes back to its place with no attempt
//! spent and the budget sends nothing until it is given credentials that differ from those
//! refused.
//!
//! # Generations
//! Every change of a budget's credentials is a new generation; each request in flight
//! remembers the generation it went with. A refusal of a request sent with an older
//! generation holds nothing: it was a refusal of those, and a page that gave new credentials
//! at the first 401 would otherwise see the budget wait again for the 401s still on their way.
//!
//! # The worker script's function
//! The worker calls it before each request of a budget ([`Engine::on_credentials_supplied`])
//! and, while the budget waits, again at most once a second when anything wakes the worker (a
//! page's message, its keep-alive, a sync), offering what it gives with
//! [`Engine::offer_credentials`]. Only headers that differ from those refused end the wait, so
//! a function that still returns the expired token never sends it again.

use super::*;

/// Credentials given for a budget, and which generation they are.
pub(super) struct GivenCredentials {
    generation: u64,
    headers: Vec<(String, String)>,
    /// Given by the worker script's function, not by a page (what a refusal's reason says).
    from_script: bool,
}

impl Engine {
    /// Headers to send with every job of `budget` from now on, each in place of the job's own
    /// of that name (an `Authorization` that replaces an expired one), and the end of its
    /// wait for credentials, if it waited: what it held goes out with them. Kept in memory
    /// only; a restarted worker waits for a page to give them again once the server refuses
    /// the jobs' own.
    pub fn set_credentials(
        &mut self,
        budget: &str,
        headers: Vec<(String, String)>,
    ) -> Result<(), EngineError> {
        self.give_credentials(budget, headers, false)
    }

    /// The worker script's `credentials` function gave `supplied` for the request `id` (a
    /// job's or a batch's) that [`Engine::poll_transmit`] handed out, which leaves now. Returns
    /// whether it is still to be sent (it may have been given up or cancelled meanwhile); the
    /// worker then sends it with `supplied` set over its headers
    /// ([`crate::job::headers_set_over`]). Headers that differ from the budget's current ones
    /// become its credentials (a new generation); the request counts as sent with them, and
    /// from `now` ([`Engine::on_sent`]): the function's wait is not the server's.
    pub fn on_credentials_supplied(
        &mut self,
        id: &str,
        supplied: Vec<(String, String)>,
        now: Millis,
    ) -> Result<bool, EngineError> {
        let Some(budget_name) = self.budget_of_attempt(id) else {
            return Ok(false);
        };
        if !self
            .budgets
            .get(&budget_name)
            .is_some_and(|b| b.in_flight.iter().any(|a| a.job == id))
        {
            return Ok(false);
        }
        if !supplied.is_empty() && !self.has_credentials(&budget_name, &supplied) {
            self.give_credentials(&budget_name, supplied, true)?;
        }
        let generation = self.credentials_generation(&budget_name);
        if let Some(entry) = self
            .budgets
            .get_mut(&budget_name)
            .and_then(|b| b.in_flight.iter_mut().find(|a| a.job == id))
        {
            entry.credentials = generation;
        }
        self.on_sent(id, now);
        Ok(true)
    }

    /// While `budget` waits for credentials, the worker script's function gave `supplied`:
    /// the wait ends only if they differ from those refused (an empty set never ends it).
    /// Returns whether it ended.
    pub fn offer_credentials(
        &mut self,
        budget: &str,
        supplied: Vec<(String, String)>,
    ) -> Result<bool, EngineError> {
        let waits = self
            .budgets
            .get(budget)
            .is_some_and(|b| b.state.credentials_needed.is_some());
        if !waits || supplied.is_empty() || self.has_credentials(budget, &supplied) {
            return Ok(false);
        }
        self.give_credentials(budget, supplied, true)?;
        Ok(true)
    }

    /// The budgets that wait for credentials, by name.
    pub fn budgets_waiting_for_credentials(&self) -> Vec<String> {
        self.budgets
            .iter()
            .filter(|(_, b)| b.state.credentials_needed.is_some())
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn give_credentials(
        &mut self,
        budget: &str,
        headers: Vec<(String, String)>,
        from_script: bool,
    ) -> Result<(), EngineError> {
        let Some(b) = self.budgets.get_mut(budget) else {
            return Err(EngineError::UnknownBudget {
                budget: budget.into(),
                known: self.budgets.keys().cloned().collect(),
            });
        };
        validate::check_headers(&headers)?;
        if b.state.credentials_needed.take().is_some() {
            self.saves.budget_changed(budget.to_string());
        }
        let generation = self.credentials_generation(budget) + 1;
        self.credentials.insert(
            budget.to_string(),
            GivenCredentials {
                generation,
                headers,
                from_script,
            },
        );
        Ok(())
    }

    fn has_credentials(&self, budget: &str, headers: &[(String, String)]) -> bool {
        self.credentials
            .get(budget)
            .is_some_and(|c| c.headers == headers)
    }

    /// The generation of `budget`'s credentials (0: none given, the jobs' own).
    pub(super) fn credentials_generation(&self, budget: &str) -> u64 {
        self.credentials.get(budget).map_or(0, |c| c.generation)
    }

    /// The headers a job goes with: its own, its key's `If-Match`, and the credentials given
    /// for its budget over them.
    pub(super) fn headers_to_send(&self, job: &Job) -> Vec<(String, String)> {
        match self.credentials.get(&job.budget) {
            Some(c) => headers_set_over(&self.etags.request_headers(job), &c.headers),
            None => self.etags.request_headers(job),
        }
    }

    /// Whether `status` means "these credentials were refused" on this budget.
    pub(super) fn refuses_credentials(
        &self,
        budget_name: &str,
        status: u16,
        signal: &ServerSignal,
    ) -> bool {
        self.budgets.get(budget_name).is_some_and(|b| {
            !signal.rate_limited && b.config.wait_for_credentials_on.contains(&status)
        })
    }

    /// The server refused the credentials `id` was sent with (generation `sent_with`): the job
    /// goes back to its place with no attempt spent, and the budget waits for new credentials
    /// unless newer ones were given since (see the module docs).
    pub(super) fn on_credentials_refused(
        &mut self,
        id: &JobId,
        budget_name: &str,
        status: u16,
        sent_with: u64,
        now: Millis,
    ) {
        let current = self.credentials.get(budget_name);
        let given = match current {
            Some(c) if c.from_script => "the credentials the worker script's function gave",
            Some(_) => "the credentials a page gave",
            None => "its jobs' own credentials",
        };
        let from = match current {
            Some(c) if c.from_script => "from it or a page (setCredentials)",
            _ => "from a page (setCredentials)",
        };
        let reason = format!(
            "budget '{budget_name}': the server refused {given} (HTTP {status}); \
             waiting for new ones {from}"
        );
        let current = self.credentials_generation(budget_name);
        if let Some(b) = self
            .budgets
            .get_mut(budget_name)
            .filter(|_| sent_with == current)
        {
            b.state.credentials_needed = Some(reason);
            self.saves.budget_changed(budget_name.to_string());
        }
        self.requeue(id, now);
    }
}
