//! Steps 4 and 5: a run takes its letters one at a time, leased, audited before and after each
//! send, and leaves a summary on the record.

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use super::report::{Outcome, RedriveError, RedriveReport};
use super::safety::Safety;
use super::{Redrive, RedriveFuture};
use crate::dlq::{AuditEntry, DeadLetter, DeadLetterStore, Failure, RedriveRecord, Resolution};
use crate::error_chain;
use crate::time::to_millis;

/// Why a letter of the snapshot was not sent after the run stopped.
const STOPPED_BEFORE: &str = "the run stopped before this letter";
/// Why a letter of the snapshot was not sent when the run could not take it.
const NOT_TAKEN: &str = "no longer pending, or leased by another run";

impl<S: DeadLetterStore + ?Sized> Redrive<'_, S> {
    pub(super) async fn execute<Fut, T, E>(
        self,
        mut make: impl FnMut(&DeadLetter) -> Result<Fut, String>,
    ) -> Result<RedriveReport, RedriveError>
    where
        Fut: RedriveFuture<Output = Result<T, E>>,
        E: fmt::Display,
    {
        let started_at = to_millis(self.clock.now());
        // The snapshot, by msg_id: a letter put back during this run keeps its place in the
        // order, behind the pages already read, so it is not sent twice.
        let snapshot = self
            .select(|letter| letter.msg_id)
            .await
            .map_err(RedriveError::Select)?;
        let mut run = Run::new(&self, started_at, snapshot.len());
        let interval = Duration::from_secs(1) / self.rate;
        let mut next_send = tokio::time::Instant::now();
        for msg_id in &snapshot {
            if run.record.stopped.is_some() {
                run.skip(msg_id, STOPPED_BEFORE);
                continue;
            }
            // The letter as it is now, held by this run: another run skips it meanwhile.
            let letter = match self
                .store
                .lease(msg_id, &run.record.run_id, self.lease)
                .await
            {
                Ok(Some(letter)) => letter,
                Ok(None) => {
                    run.skip(msg_id, NOT_TAKEN);
                    continue;
                }
                Err(e) => {
                    run.stop(error_chain(&e).to_string());
                    run.skip(msg_id, STOPPED_BEFORE);
                    continue;
                }
            };
            if let Some(why) = self.safety.refuses(&letter, self.clock.now()) {
                self.skip_held(&mut run, msg_id, why).await;
                continue;
            }
            let call = match make(&letter) {
                Ok(call) => call,
                Err(why) => {
                    self.skip_held(&mut run, msg_id, why).await;
                    continue;
                }
            };
            if let Some(why) = Safety::key_mismatch(&letter, call.idempotency_key()) {
                self.skip_held(&mut run, msg_id, why).await;
                continue;
            }
            tokio::time::sleep_until(next_send).await;
            next_send = tokio::time::Instant::now() + interval;
            let intent = self.audit_row(&run, msg_id);
            if let Err(e) = self.store.audit(&intent).await {
                // No send without its audit row.
                self.release(&mut run, msg_id).await;
                run.stop(format!(
                    "the audit row of {msg_id} could not be written: {}",
                    error_chain(&e)
                ));
                run.skip(msg_id, "its audit row could not be written: not sent");
                continue;
            }
            let outcome = match self.send_holding_lease(call, msg_id, &run).await {
                Ok(_) => self.resolve(&mut run, msg_id).await,
                Err(e) => self.put_back(&mut run, msg_id, e.to_string()).await,
            };
            let done = intent.finished(outcome.audit_text(), to_millis(self.clock.now()));
            if let Err(e) = self.store.audit(&done).await {
                run.stop(format!(
                    "the outcome of {msg_id} could not be written to its audit row (left as an intent): {}",
                    error_chain(&e)
                ));
            }
            run.letters.push((msg_id.clone(), outcome));
            if run.record.failed >= u64::from(self.stop_after_failures)
                && run.record.stopped.is_none()
            {
                run.stop(format!(
                    "{} letters failed again, the threshold of this run",
                    run.record.failed
                ));
            }
        }
        run.record.finished_at = to_millis(self.clock.now());
        let report = RedriveReport {
            record: run.record,
            letters: run.letters,
        };
        tracing::info!(target: "retry_core::dlq",
            run_id = %report.record.run_id,
            who = %report.record.who,
            filter = %report.record.filter,
            target = %report.record.target,
            selected = report.record.selected,
            succeeded = report.record.succeeded,
            failed = report.record.failed,
            skipped = report.record.skipped,
            stopped = report.record.stopped.as_deref(),
            "dead letters redriven"
        );
        match self.store.record_redrive(&report.record).await {
            Ok(()) => Ok(report),
            Err(error) => Err(RedriveError::Audit {
                report: Box::new(report),
                error,
            }),
        }
    }

    /// This run's audit row for `msg_id`, as an intent written now.
    fn audit_row(&self, run: &Run, msg_id: &str) -> AuditEntry {
        AuditEntry::intent(
            run.record.run_id.as_str(),
            msg_id,
            self.who.as_str(),
            self.target.as_str(),
            to_millis(self.clock.now()),
        )
    }

    /// Awaits `call` while renewing this run's lease on `msg_id` every third of it, so a slow
    /// receiver does not let another run take the letter and send it at the same time.
    async fn send_holding_lease<F: Future>(&self, call: F, msg_id: &str, run: &Run) -> F::Output {
        let mut call = std::pin::pin!(call);
        let renew_every = self.lease / 3;
        loop {
            match tokio::time::timeout(renew_every, call.as_mut()).await {
                Ok(output) => return output,
                Err(_) => match self
                    .store
                    .lease(msg_id, &run.record.run_id, self.lease)
                    .await
                {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        tracing::warn!(target: "retry_core::dlq", run_id = %run.record.run_id, %msg_id, "redrive lost its lease while sending: another run may send the letter too");
                    }
                    Err(error) => {
                        tracing::warn!(target: "retry_core::dlq", run_id = %run.record.run_id, %msg_id, error = %error_chain(&error), "redrive could not renew its lease while sending");
                    }
                },
            }
        }
    }

    /// A letter this run holds is not sent: its audit row says why, and the lease ends.
    async fn skip_held(&self, run: &mut Run, msg_id: &str, why: String) {
        let outcome = Outcome::Skipped(why);
        let row = self
            .audit_row(run, msg_id)
            .finished(outcome.audit_text(), to_millis(self.clock.now()));
        if let Err(e) = self.store.audit(&row).await {
            run.stop(format!(
                "the audit row of {msg_id} could not be written: {}",
                error_chain(&e)
            ));
        }
        self.release(run, msg_id).await;
        run.record.skipped += 1;
        run.letters.push((msg_id.to_owned(), outcome));
    }

    async fn release(&self, run: &mut Run, msg_id: &str) {
        if let Err(e) = self.store.release(msg_id, &run.record.run_id).await {
            // The lease runs out by itself; until then other runs skip the letter.
            run.stop(format!(
                "dead-letter store failed to release {msg_id}: {}",
                error_chain(&e)
            ));
        }
    }

    async fn resolve(&self, run: &mut Run, msg_id: &str) -> Outcome {
        run.record.succeeded += 1;
        let resolution = Resolution::new(self.who.as_str(), to_millis(self.clock.now()))
            .in_run(run.record.run_id.as_str());
        match self.store.resolve(msg_id, &resolution).await {
            Ok(true) => {}
            Ok(false) => {
                // Resolved by hand meanwhile, or the lease ran out and another run has it: the
                // effect happened once here, and the receiver answers any resend from its store.
                tracing::warn!(target: "retry_core::dlq", run_id = %run.record.run_id, %msg_id, "redriven, but the letter was no longer this run's to resolve");
            }
            Err(e) => {
                // The effect happened and the letter is still pending: a later redrive is
                // answered from the receiver's store, so nothing repeats; but this store is in
                // trouble.
                run.stop(format!(
                    "dead-letter store failed to resolve {msg_id} (still pending): {}",
                    error_chain(&e)
                ));
            }
        }
        Outcome::Redriven
    }

    async fn put_back(&self, run: &mut Run, msg_id: &str, error: String) -> Outcome {
        let reason = format!("redrive by {} failed: {error}", self.who);
        run.record.failed += 1;
        let failure = Failure {
            at: to_millis(self.clock.now()),
            reason: reason.clone(),
            trace_id: run.record.run_id.clone(),
        };
        match self
            .store
            .put_back(msg_id, &run.record.run_id, &failure)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(target: "retry_core::dlq", run_id = %run.record.run_id, %msg_id, "failed again, but the letter was no longer this run's to put back");
            }
            Err(e) => {
                // The letter as it was stays pending (leased until it runs out): nothing is
                // lost, only this attempt's count.
                run.stop(format!(
                    "dead-letter store failed to put back {msg_id} (still pending as it was): {}",
                    error_chain(&e)
                ));
            }
        }
        Outcome::FailedAgain(reason)
    }
}

/// A run's tally while it goes.
struct Run {
    record: RedriveRecord,
    letters: Vec<(String, Outcome)>,
}

impl Run {
    fn new<S: ?Sized>(redrive: &Redrive<'_, S>, started_at: SystemTime, selected: usize) -> Self {
        Run {
            record: RedriveRecord {
                run_id: format!("{:016x}", rand::random::<u64>()),
                who: redrive.who.clone(),
                filter: redrive.filter.to_string(),
                target: redrive.target.clone(),
                finished_at: started_at,
                started_at,
                limit: redrive.limit as u64,
                rate_per_second: redrive.rate,
                selected: selected as u64,
                succeeded: 0,
                failed: 0,
                skipped: 0,
                stopped: None,
            },
            letters: Vec::with_capacity(selected),
        }
    }

    /// A letter not sent, without an audit row: this run never held it.
    fn skip(&mut self, msg_id: &str, why: &str) {
        self.record.skipped += 1;
        self.letters
            .push((msg_id.to_owned(), Outcome::Skipped(why.to_owned())));
    }

    fn stop(&mut self, why: String) {
        tracing::warn!(target: "retry_core::dlq", run_id = %self.record.run_id, "redrive stopped: {why}");
        self.record.stopped = Some(why);
    }
}
