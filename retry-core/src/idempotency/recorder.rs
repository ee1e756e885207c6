//! The holder's side of the body's steps: while a claim is [held](super::HeldClaim::hold), the
//! body's [`step`](super::step) calls send their journal reads and writes here, and the holder,
//! which has the store, runs them against the claim's journal.
//!
//! The body cannot reach the store itself: the claim it runs under is found through a
//! task-local, which can only hold `'static` values, and the store is borrowed by the call. So
//! the body holds a [`Recorder`] (a channel) and the holder polls [`serve`] beside the body, the
//! same way it polls the lease's renewal.

use std::collections::{HashMap, HashSet};

use tokio::sync::{mpsc, oneshot};

use super::operation_timeout::{bounded, timed_out};
use super::{
    Claim, IdempotencyError, IdempotencyStore, StepError, StepState, StepWrite, StoreError,
};
use crate::metrics;

/// What a step asks of its holder.
pub(super) enum Request {
    /// The step `label` is about to run: its journaled output if it finished before, otherwise
    /// whether it is in doubt (after `Started` is journaled, when `start` asks for it).
    Open {
        label: String,
        start: bool,
        reply: oneshot::Sender<Result<Opened, IdempotencyError>>,
    },
    /// The step `label` finished with `output` (JSON): journal it, fenced by the claim.
    Finish {
        label: String,
        output: String,
        reply: oneshot::Sender<Result<(), IdempotencyError>>,
    },
    /// A transactional step committed `output` with its writes: only the holder's copy of the
    /// journal is told.
    Committed { label: String, output: String },
    /// The body starts again (a retry inside the claim): its labels may be used again.
    NewRun,
}

/// What [`Request::Open`] found.
#[derive(Debug)]
pub(super) enum Opened {
    /// The step finished in an earlier run: its output, not to be run again.
    Finished(String),
    /// The step is to run; `in_doubt` when an earlier run started it and never finished.
    Run { in_doubt: bool },
}

/// The body's end of the channel to its holder.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    requests: mpsc::UnboundedSender<Request>,
}

/// A recorder for the body, and the holder's end to [`serve`].
pub(super) fn channel() -> (Recorder, mpsc::UnboundedReceiver<Request>) {
    let (requests, served) = mpsc::unbounded_channel();
    (Recorder { requests }, served)
}

impl Recorder {
    /// Asks the holder whether the step `label` runs (see [`Request::Open`]).
    pub(super) async fn open(&self, label: &str, start: bool) -> Result<Opened, IdempotencyError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Open {
            label: label.to_owned(),
            start,
            reply,
        };
        self.ask(label, request, answer).await
    }

    /// Has the holder journal the step's output (see [`Request::Finish`]).
    pub(super) async fn finish(&self, label: &str, output: String) -> Result<(), IdempotencyError> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Finish {
            label: label.to_owned(),
            output,
            reply,
        };
        self.ask(label, request, answer).await
    }

    /// Tells the holder that a transactional step committed its output.
    pub(super) fn committed(&self, label: &str, output: String) {
        // A holder that stopped serving has no journal left to keep up to date.
        let _ = self.requests.send(Request::Committed {
            label: label.to_owned(),
            output,
        });
    }

    /// Tells the holder that the body starts again (see [`Request::NewRun`]).
    pub(super) fn new_run(&self) {
        let _ = self.requests.send(Request::NewRun);
    }

    async fn ask<T>(
        &self,
        label: &str,
        request: Request,
        answer: oneshot::Receiver<Result<T, IdempotencyError>>,
    ) -> Result<T, IdempotencyError> {
        let gone = || IdempotencyError::Step(StepError::Gone(label.to_owned()));
        self.requests.send(request).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// The pauses before journaling a step's output is tried again (three tries in all): an
/// output not journaled makes the next run do the step again, in doubt.
const FINISH_RETRY_PAUSES: [std::time::Duration; 2] = [
    std::time::Duration::from_millis(20),
    std::time::Duration::from_millis(100),
];

/// Serves the body's steps for `claim` on `store` until the body drops its recorder (it
/// finished): reads the journal once, at the first step, and keeps it up to date.
pub(super) async fn serve<S: IdempotencyStore + ?Sized>(
    store: &S,
    claim: &Claim,
    function: &str,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    let mut journal = Journal {
        store,
        claim,
        function,
        steps: None,
        ran: HashSet::new(),
    };
    while let Some(request) = requests.recv().await {
        match request {
            Request::Open {
                label,
                start,
                reply,
            } => {
                let _ = reply.send(journal.open(label, start).await);
            }
            Request::Finish {
                label,
                output,
                reply,
            } => {
                let _ = reply.send(journal.finish(label, output).await);
            }
            Request::Committed { label, output } => {
                if let Some(steps) = &mut journal.steps {
                    steps.insert(label, StepState::Finished(output));
                }
            }
            Request::NewRun => journal.ran.clear(),
        }
    }
}

/// The holder's view of its claim's journal.
struct Journal<'a, S: ?Sized> {
    store: &'a S,
    claim: &'a Claim,
    function: &'a str,
    /// Read at the first step.
    steps: Option<HashMap<String, StepState>>,
    /// The labels this run has opened.
    ran: HashSet<String>,
}

impl<S: IdempotencyStore + ?Sized> Journal<'_, S> {
    async fn open(&mut self, label: String, start: bool) -> Result<Opened, IdempotencyError> {
        if self.ran.contains(&label) {
            return Err(StepError::LabelReused(label).into());
        }
        let steps = match &mut self.steps {
            Some(steps) => steps,
            None => {
                let read =
                    bounded(self.store, "read_steps", self.store.read_steps(self.claim)).await?;
                let read = read.into_iter().map(|entry| (entry.label, entry.state));
                self.steps.insert(read.collect())
            }
        };
        let in_doubt = match steps.get(&label) {
            Some(StepState::Finished(output)) => {
                tracing::debug!(target: "retry_core::idempotency", function = self.function, key = %self.claim.key, step = %label, "step finished in an earlier run: its journaled output is returned");
                let output = output.clone();
                self.ran.insert(label);
                return Ok(Opened::Finished(output));
            }
            Some(StepState::Started) => true,
            None => false,
        };
        if in_doubt {
            tracing::warn!(target: "retry_core::idempotency", function = self.function, key = %self.claim.key, step = %label, "step started in an earlier run and never finished: running it again in doubt, with the same derived key");
            metrics::step_in_doubt(self.function);
        } else if start {
            let write = self
                .store
                .write_step(self.claim, &label, StepWrite::Started);
            bounded(self.store, "write_step", write).await?;
            steps.insert(label.clone(), StepState::Started);
        }
        self.ran.insert(label);
        Ok(Opened::Run { in_doubt })
    }

    async fn finish(&mut self, label: String, output: String) -> Result<(), IdempotencyError> {
        let max = self.store.limits().max_response_bytes;
        if output.len() > max {
            return Err(IdempotencyError::ResponseTooLarge {
                len: output.len(),
                max,
            });
        }
        let mut pauses = FINISH_RETRY_PAUSES.iter();
        loop {
            let write = self
                .store
                .write_step(self.claim, &label, StepWrite::Finished(&output));
            match bounded(self.store, "write_step", write).await {
                Ok(()) => break,
                Err(e) if !timed_out(&e) && !matches!(e, StoreError::Fenced) => {
                    match pauses.next() {
                        Some(pause) => {
                            tracing::warn!(target: "retry_core::idempotency", function = self.function, key = %self.claim.key, step = %label, error = %crate::error_chain(&e), "journaling the step's output failed; trying again");
                            tokio::time::sleep(*pause).await;
                        }
                        None => return Err(self.not_journaled(&label, e)),
                    }
                }
                Err(e) => return Err(self.not_journaled(&label, e)),
            }
        }
        if let Some(steps) = &mut self.steps {
            steps.insert(label, StepState::Finished(output));
        }
        Ok(())
    }

    fn not_journaled(&self, label: &str, e: StoreError) -> IdempotencyError {
        tracing::error!(target: "retry_core::idempotency", function = self.function, key = %self.claim.key, step = %label, error = %crate::error_chain(&e), "step's effect happened but its output was not journaled: the next run does it again in doubt, with the same derived key");
        IdempotencyError::Store(e)
    }
}
