//! Parsing and checking the arguments of `#[retryable(...)]`.

use std::time::Duration;

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned as _;
use syn::{Expr, LitInt, LitStr, Path};

use crate::errors::Errors;
use crate::suggest::{closest, unknown_hint};

const ARGUMENTS: &[&str] = &[
    "max",
    "base",
    "cap",
    "jitter",
    "deadline",
    "max_retry_after",
    "attempt_timeout",
    "retry_if",
    "on_retry",
    "policy",
    "budget",
    "dlq",
    "crate",
];

const DLQ_ARGUMENTS: &[&str] = &["sink", "id", "original", "redact", "classes"];

/// `dlq(sink = expr, id = expr, original = expr, redact = path)`.
pub(crate) struct DlqArgs {
    pub(crate) sink: Expr,
    pub(crate) id: Expr,
    pub(crate) original: Expr,
    pub(crate) redact: Option<Path>,
    /// `classes = ".."`: which failure classes are parked (`None`: every class).
    pub(crate) classes: Option<Classes>,
    /// The `dlq` token, where errors about the whole clause point.
    pub(crate) span: Span,
}

/// The failure classes `dlq(classes = "..")` parks.
#[derive(Clone, Copy)]
pub(crate) enum Classes {
    /// Give-ups after transient errors only: a `Stop` (a declined card) is an answer.
    System,
    /// `Stop` give-ups only.
    Data,
}

/// Arguments that describe the policy itself; `policy = expr` replaces all of them.
const KNOBS: &[&str] = &[
    "max",
    "base",
    "cap",
    "jitter",
    "deadline",
    "max_retry_after",
];

const JITTERS: &[&str] = &["none", "full", "equal", "decorrelated"];

// The defaults of `retry_core::Policy::new()`, needed here to check `base <= cap` when only one
// of them is written.
const DEFAULT_BASE: Duration = Duration::from_secs(1);
const DEFAULT_CAP: Duration = Duration::from_secs(30);

/// A checked literal with the span of its token.
pub(crate) struct Spanned<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

#[derive(Default)]
pub(crate) struct RetryArgs {
    pub(crate) max: Option<Spanned<u32>>,
    pub(crate) base: Option<Spanned<Duration>>,
    pub(crate) cap: Option<Spanned<Duration>>,
    pub(crate) jitter: Option<Spanned<String>>,
    pub(crate) deadline: Option<Spanned<Duration>>,
    pub(crate) max_retry_after: Option<Spanned<Duration>>,
    pub(crate) attempt_timeout: Option<Spanned<Duration>>,
    pub(crate) retry_if: Option<Path>,
    pub(crate) on_retry: Option<Path>,
    pub(crate) policy: Option<Expr>,
    pub(crate) budget: Option<Expr>,
    pub(crate) dlq: Option<DlqArgs>,
    pub(crate) krate: Option<Path>,
    /// Every knob written, in order, for the `policy` conflict check.
    knobs: Vec<(String, Span)>,
    /// Every argument written, for the duplicate check.
    seen: Vec<String>,
}

impl RetryArgs {
    /// Parses one `name = value` item; errors that leave the input in a known state are
    /// collected in `errors` so the rest is still checked.
    pub(crate) fn parse_one(
        &mut self,
        meta: ParseNestedMeta<'_>,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let key = meta
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_else(|| {
                // `crate` is a keyword: `get_ident` does not see it.
                if meta.path.is_ident("crate") {
                    "crate".to_owned()
                } else {
                    String::new()
                }
            });
        let key_span = meta.path.span();
        if !ARGUMENTS.contains(&key.as_str()) {
            let shown = quote::ToTokens::to_token_stream(&meta.path)
                .to_string()
                .replace(' ', "");
            let hint = unknown_hint(&shown, ARGUMENTS);
            errors.at(
                key_span,
                format!("unknown `#[retryable]` argument `{shown}`{hint}"),
            );
            return skip_value(&meta);
        }
        if self.seen.contains(&key) {
            errors.at(
                key_span,
                format!("duplicate `{key}` argument; write it once"),
            );
            return skip_value(&meta);
        }
        self.seen.push(key.clone());
        if KNOBS.contains(&key.as_str()) {
            self.knobs.push((key.clone(), key_span));
        }
        if key == "dlq" && !cfg!(feature = "dlq") {
            errors.at(
                key_span,
                "`dlq(..)` needs retry-core's `dlq` feature, which is on by default; \
                 drop `default-features = false` or add `features = [\"dlq\"]` to retry-core",
            );
            return skip_value(&meta);
        }
        if key == "dlq" {
            self.dlq = parse_dlq(&meta, key_span, errors)?;
            return Ok(());
        }
        let value = meta.value()?;
        match key.as_str() {
            "max" => {
                let lit: LitInt = value.parse()?;
                match lit.base10_parse::<u32>() {
                    Ok(0) => errors.at(
                        lit.span(),
                        "`max` must be at least 1; use `max = 1` to call once without retrying",
                    ),
                    Ok(n) if n > 1000 => errors.at(
                        lit.span(),
                        format!("`max` must be at most 1000, not {n}; bound a long retry by time with `deadline = \"...\"` instead"),
                    ),
                    Ok(n) => self.max = Some(Spanned { value: n, span: lit.span() }),
                    Err(_) => errors.at(lit.span(), "`max` must be a whole number from 1 to 1000"),
                }
            }
            "base" => self.base = parse_duration(value.parse()?, errors),
            "cap" => self.cap = parse_duration(value.parse()?, errors),
            "deadline" => {
                self.deadline = longer_than_zero(
                    parse_duration(value.parse()?, errors),
                    "`deadline` must be longer than zero: no attempt could start",
                    errors,
                )
            }
            "max_retry_after" => self.max_retry_after = parse_duration(value.parse()?, errors),
            "attempt_timeout" => {
                self.attempt_timeout = longer_than_zero(
                    parse_duration(value.parse()?, errors),
                    "`attempt_timeout` must be longer than zero: every attempt would be cut off at once",
                    errors,
                )
            }
            "jitter" => {
                let lit: LitStr = value.parse()?;
                let name = lit.value();
                if JITTERS.contains(&name.as_str()) {
                    self.jitter = Some(Spanned {
                        value: name,
                        span: lit.span(),
                    });
                } else {
                    let hint = match closest(&name, JITTERS) {
                        Some(near) => format!("; did you mean \"{near}\"?"),
                        None => String::new(),
                    };
                    errors.at(
                        lit.span(),
                        format!("unknown jitter \"{name}\"; expected one of \"none\", \"full\", \"equal\", \"decorrelated\"{hint}"),
                    );
                }
            }
            "retry_if" => self.retry_if = Some(value.parse()?),
            "on_retry" => self.on_retry = Some(value.parse()?),
            "policy" => self.policy = Some(value.parse()?),
            "budget" => self.budget = Some(value.parse()?),
            "crate" => self.krate = Some(value.call(Path::parse_mod_style)?),
            _ => {}
        }
        Ok(())
    }

    /// The literal `deadline`, if any.
    pub(crate) fn deadline_value(&self) -> Option<Duration> {
        self.deadline.as_ref().map(|d| d.value)
    }

    /// The literal `attempt_timeout`, if any.
    pub(crate) fn attempt_timeout_value(&self) -> Option<Duration> {
        self.attempt_timeout.as_ref().map(|d| d.value)
    }

    /// Checks that need all arguments: `base <= cap`, `policy` without knobs.
    pub(crate) fn check(&self, errors: &mut Errors) {
        if self.policy.is_some() {
            for (knob, span) in &self.knobs {
                errors.at(
                    *span,
                    format!(
                        "`{knob}` cannot be combined with `policy`: set it on the `Policy` instead (`{}`), or remove `policy`",
                        policy_method(knob)
                    ),
                );
            }
        }
        let base = self.base.as_ref().map_or(DEFAULT_BASE, |b| b.value);
        let cap = self.cap.as_ref().map_or(DEFAULT_CAP, |c| c.value);
        if base > cap {
            let (span, which) = match (&self.base, &self.cap) {
                (Some(b), Some(_)) => (b.span, format!("`cap` ({cap:?})")),
                (Some(b), None) => (b.span, format!("the default `cap` ({cap:?})")),
                (None, Some(c)) => (c.span, format!("the default `base` ({base:?})")),
                (None, None) => return,
            };
            let message = if self.base.is_some() {
                format!(
                    "`base` ({base:?}) is longer than {which}, so no wait could grow from it; lower `base` or raise `cap`"
                )
            } else {
                format!(
                    "`cap` ({cap:?}) is shorter than {which}, so no wait could grow from it; raise `cap` or set a smaller `base`"
                )
            };
            errors.at(span, message);
        }
    }
}

fn parse_dlq(
    meta: &ParseNestedMeta<'_>,
    span: Span,
    errors: &mut Errors,
) -> syn::Result<Option<DlqArgs>> {
    let (mut sink, mut id, mut original, mut redact) = (None, None, None, None);
    let mut classes = None;
    meta.parse_nested_meta(|inner| {
        let name = inner
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let at = inner.path.span();
        match name.as_str() {
            "sink" => sink = Some(inner.value()?.parse::<Expr>()?),
            "id" => id = Some(inner.value()?.parse::<Expr>()?),
            "original" => original = Some(inner.value()?.parse::<Expr>()?),
            "redact" => redact = Some(inner.value()?.parse::<Path>()?),
            "classes" => {
                let lit: LitStr = inner.value()?.parse()?;
                match lit.value().as_str() {
                    "system" => classes = Some(Classes::System),
                    "data" => classes = Some(Classes::Data),
                    "all" => classes = None,
                    other => errors.at(
                        lit.span(),
                        format!("unknown failure class \"{other}\"; expected \"system\" (give-ups after transient failures), \"data\" (give-ups on `Stop`) or \"all\" (the default)"),
                    ),
                }
            }
            _ => {
                let hint = unknown_hint(&name, DLQ_ARGUMENTS);
                errors.at(at, format!("unknown `dlq` argument `{name}`{hint}"));
                return skip_value(&inner);
            }
        }
        Ok(())
    })?;
    let mut missing = Vec::new();
    if sink.is_none() {
        missing.push("`sink = ...` (where letters are parked)");
    }
    if id.is_none() {
        missing.push("`id = ...` (the message id, ideally the receiver's idempotency key)");
    }
    if original.is_none() {
        missing.push("`original = ...` (the request, serialisable)");
    }
    if !missing.is_empty() {
        errors.at(span, format!("`dlq(...)` needs {}", missing.join(", ")));
        return Ok(None);
    }
    Ok(sink
        .zip(id)
        .zip(original)
        .map(|((sink, id), original)| DlqArgs {
            sink,
            id,
            original,
            redact,
            classes,
            span,
        }))
}

/// A duration literal in retry-core's one grammar (the `retry-duration` crate, which
/// `Policy`'s configuration and the `retry-dlq` command read with too); an error points at it.
fn parse_duration(lit: LitStr, errors: &mut Errors) -> Option<Spanned<Duration>> {
    match retry_duration::parse(&lit.value()) {
        Ok(value) => Some(Spanned {
            value,
            span: lit.span(),
        }),
        Err(message) => {
            errors.at(lit.span(), message);
            None
        }
    }
}

/// `duration`, unless it is zero: then `message` at its literal (the words `Policy`'s builder
/// panics with, and its configuration reports, for the same value).
fn longer_than_zero(
    duration: Option<Spanned<Duration>>,
    message: &str,
    errors: &mut Errors,
) -> Option<Spanned<Duration>> {
    match duration {
        Some(zero) if zero.value.is_zero() => {
            errors.at(zero.span, message);
            None
        }
        other => other,
    }
}

/// Consumes `= value` or `(...)` after an argument that was already reported.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_value(&inner))?;
    }
    Ok(())
}

fn policy_method(knob: &str) -> &'static str {
    match knob {
        "max" => ".max_attempts(n)",
        "base" => ".base(duration)",
        "cap" => ".cap(duration)",
        "jitter" => ".jitter(Jitter::...)",
        "deadline" => ".deadline(duration)",
        _ => ".max_retry_after(duration)",
    }
}
