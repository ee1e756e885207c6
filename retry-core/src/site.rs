//! A call's identity: the retrying function as metrics and tracing name it, the counters kept
//! under that name, and what its call sites are told once.

use std::panic::Location;

use crate::metrics::{increment, names};

/// What tracing and metrics call a closure retry that was not given a name
/// ([`RetryCall::name`](crate::RetryCall::name)).
pub(crate) const CLOSURE_NAME: &str = "closure";

/// A retrying function as metrics and tracing name it: its name and the keys of its counters,
/// built at compile time (`#[retryable]` emits a `static` per function), so counting a call
/// neither allocates nor hashes.
///
/// Not public API: `#[retryable]` emits one through `__private`.
#[doc(hidden)]
#[derive(Debug)]
pub struct Site {
    function: &'static str,
    module: &'static str,
    calls: ::metrics::Key,
    retries: ::metrics::Key,
    nested: ::metrics::Key,
    budget_refusals: ::metrics::Key,
}

impl Site {
    /// The `function` and `module` labels, for [`Site::new`]'s `labels`.
    pub const fn labels(function: &'static str, module: &'static str) -> [::metrics::Label; 2] {
        [
            ::metrics::Label::from_static_parts("function", function),
            ::metrics::Label::from_static_parts("module", module),
        ]
    }

    /// The site of `function` in `module` (`module_path!()`; empty for a closure retry);
    /// `labels` are its [`Site::labels`], in a `static` of their own.
    pub const fn new(
        function: &'static str,
        module: &'static str,
        labels: &'static [::metrics::Label; 2],
    ) -> Site {
        Site {
            function,
            module,
            calls: ::metrics::Key::from_static_parts(names::CALLS, labels),
            retries: ::metrics::Key::from_static_parts(names::RETRIES, labels),
            nested: ::metrics::Key::from_static_parts(names::NESTED_SUPPRESSED, labels),
            budget_refusals: ::metrics::Key::from_static_parts(names::BUDGET_REFUSALS, labels),
        }
    }

    /// The function's name.
    pub(crate) const fn function(&self) -> &'static str {
        self.function
    }

    /// The function's module path; empty for a closure retry.
    pub(crate) const fn module(&self) -> &'static str {
        self.module
    }

    /// The site of a closure retry named `function` at run time: made once per distinct name
    /// and kept for the life of the process (names are `&'static str`, so there are as many
    /// sites as names in the program).
    /// Inlined, so an unnamed closure retry (the name a constant) resolves at compile time.
    #[inline]
    pub(crate) fn named(function: &'static str) -> &'static Site {
        static LABELS: [::metrics::Label; 2] = Site::labels(CLOSURE_NAME, "");
        static CLOSURE: Site = Site::new(CLOSURE_NAME, "", &LABELS);
        if function == CLOSURE.function {
            return &CLOSURE;
        }
        Site::interned(function)
    }

    /// The site of a name other than the default: the last one this thread used when it is
    /// the same name, else from the registry. Every request through a `RetryLayer` or a
    /// `RetryMiddleware` (and every `.name(..)`d closure retry) asks for its site, so a loop
    /// calling one named retry must not take the registry's lock each time: with many threads
    /// that lock would be the one point they all meet at.
    fn interned(function: &'static str) -> &'static Site {
        crate::loom_sync::thread_local_cell! {
            /// The site this thread looked up last.
            static LAST: std::cell::Cell<Option<&'static Site>> = std::cell::Cell::new(None);
        }
        let last = LAST.try_with(std::cell::Cell::get).ok().flatten();
        // Pointer first: the same literal is the same `&'static str` almost always.
        if let Some(site) =
            last.filter(|site| std::ptr::eq(site.function, function) || site.function == function)
        {
            return site;
        }
        let site = Site::registered(function);
        // Err: the thread is exiting; the next lookup takes the lock again.
        let _ = LAST.try_with(|last| last.set(Some(site)));
        site
    }

    /// The registry of named sites: a lock and a short list (one entry per name the program
    /// gives a closure retry), taken only when a thread changes names. Each site is made once
    /// and kept for the life of the process, which is what lets metrics keys and frames refer
    /// to it as `&'static`.
    #[cold]
    fn registered(function: &'static str) -> &'static Site {
        static NAMED: std::sync::Mutex<Vec<&'static Site>> = std::sync::Mutex::new(Vec::new());
        let mut named = NAMED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(site) = named.iter().find(|site| site.function == function) {
            return site;
        }
        let labels: &'static [::metrics::Label; 2] =
            Box::leak(Box::new(Site::labels(function, "")));
        let site: &'static Site = Box::leak(Box::new(Site::new(function, "", labels)));
        named.push(site);
        site
    }
}

#[inline]
pub(crate) fn call_started(site: &'static Site) {
    increment(&site.calls);
}

#[inline]
pub(crate) fn retried(site: &'static Site) {
    increment(&site.retries);
}

pub(crate) fn gave_up(site: &'static Site, reason: &'static str) {
    ::metrics::counter!(
        names::GIVE_UPS,
        "function" => site.function,
        "module" => site.module,
        "reason" => reason
    )
    .increment(1);
}

/// A sink refused `site`'s dead letter.
#[cfg(feature = "dlq")]
pub(crate) fn park_failed(site: &'static Site) {
    ::metrics::counter!(
        names::DLQ_PARK_FAILURES,
        "function" => site.function,
        "module" => site.module
    )
    .increment(1);
}

pub(crate) fn nested_suppressed(site: &'static Site) {
    increment(&site.nested);
}

pub(crate) fn budget_refused(site: &'static Site) {
    increment(&site.budget_refusals);
}

/// What a call site is told once, at WARN: once per call site is news, once per call would flood
/// the log during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warning {
    /// A retry started inside another, so it made a single attempt.
    Nested,
    /// A policy's `attempt_timeout` that the call cannot apply (see `State::bound`).
    Untimed,
    /// A non-idempotent request without `Idempotency-Key` that failed after it may have
    /// reached the server, so it was not sent again.
    #[cfg(feature = "http")]
    UnsafeResend,
}

/// Where something was said: a line of code, or a retrying function (by its site's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Code(&'static str, u32, u32),
    #[cfg(feature = "http")]
    Function(usize),
}

/// Whether `what` was not said at `caller` yet (and marks it said). Only the calls that have
/// something to say come here, so the lock is off the common path.
pub(crate) fn first_time_at(what: Warning, caller: &'static Location<'static>) -> bool {
    first_time((
        what,
        Place::Code(caller.file(), caller.line(), caller.column()),
    ))
}

/// Whether `what` was not said for the retrying function `site` yet (and marks it said).
#[cfg(feature = "http")]
pub(crate) fn first_time_for(what: Warning, site: &'static Site) -> bool {
    first_time((what, Place::Function(std::ptr::from_ref(site) as usize)))
}

fn first_time(key: (Warning, Place)) -> bool {
    static SAID: std::sync::Mutex<Vec<(Warning, Place)>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.contains(&key) {
        return false;
    }
    said.push(key);
    true
}
