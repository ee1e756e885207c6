//! How a failed attempt's error is written in events and dead letters when its classifier has no
//! reason for it: found by an autoref probe where the generated loop knows the error's type.

use crate::{Classifier, Decision};

/// The classifier of one failed attempt, with words for the error when the classifier has none
/// ([`Classify::reason`](crate::Classify::reason) returns `None` by default): the error's `Display`, else its `Debug`, as
/// [`Describe`] found them. Events and dead letters then never say `error=""`.
pub struct Described<'c, C, E> {
    inner: &'c mut C,
    describe: fn(&E) -> Option<String>,
}

impl<'c, C, E> Described<'c, C, E> {
    /// `inner`, with `describe` for the errors it has no reason for.
    #[inline]
    pub fn new(inner: &'c mut C, describe: fn(&E) -> Option<String>) -> Self {
        Described { inner, describe }
    }
}

impl<C: Classifier<E>, E> Classifier<E> for Described<'_, C, E> {
    #[inline]
    fn decide(&mut self, error: &E) -> Decision {
        self.inner.decide(error)
    }
    fn reason(&mut self, error: &E) -> Option<String> {
        self.inner.reason(error).or_else(|| (self.describe)(error))
    }
}

/// The error of a failed attempt, probed by autoref for how it can be written:
/// `(&&&Describe::of(&error)).describe()` picks [`DescribeDisplay`] when `E: Display`, else
/// [`DescribeDebug`] when `E: Debug`, else [`DescribeNothing`].
pub struct Describe<E>(std::marker::PhantomData<fn(&E)>);

impl<E> Describe<E> {
    /// The probe for `error`'s type.
    #[inline]
    pub fn of(_: &E) -> Self {
        Describe(std::marker::PhantomData)
    }
}

/// See [`Describe`]: `E: Display`.
pub trait DescribeDisplay<E> {
    /// `error.to_string()`.
    fn describe(&self) -> fn(&E) -> Option<String>;
}

impl<E: std::fmt::Display> DescribeDisplay<E> for &&Describe<E> {
    #[inline]
    fn describe(&self) -> fn(&E) -> Option<String> {
        |error| Some(error.to_string())
    }
}

/// See [`Describe`]: `E: Debug`.
pub trait DescribeDebug<E> {
    /// `format!("{error:?}")`.
    fn describe(&self) -> fn(&E) -> Option<String>;
}

impl<E: std::fmt::Debug> DescribeDebug<E> for &Describe<E> {
    #[inline]
    fn describe(&self) -> fn(&E) -> Option<String> {
        |error| Some(format!("{error:?}"))
    }
}

/// See [`Describe`]: an error that can be written neither way.
pub trait DescribeNothing<E> {
    /// Nothing.
    fn describe(&self) -> fn(&E) -> Option<String>;
}

impl<E> DescribeNothing<E> for Describe<E> {
    #[inline]
    fn describe(&self) -> fn(&E) -> Option<String> {
        |_| None
    }
}
