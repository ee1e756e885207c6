//! The program `scripts/bench-instructions` runs under callgrind (BENCHMARKS.md, "Instructions
//! per call"):
//!
//! - `instructions IMPL CASE CALLS`: checks that `IMPL` does the work of `CASE`, then makes `CALLS`
//!   calls of it. Run with `N` and `2N` calls, `(I(2N) - I(N)) / N` is the cost of one call: the
//!   start-up, the runtime and the check cancel out. `CASE` is `a_success` or `b_three_failures`
//!   (`IMPL`: plain, hand_loop, hand_fastrand, retryable, policy_retry, backon, backon_nosleep,
//!   tokio_retry2), or
//!   `c_1000_delays` (`IMPL`: hand_smallrng, hand_fastrand, retry_core, backon, tokio_retry2; one
//!   call computes 1,000 jittered delays).
//! - `instructions` alone: checks every implementation on every case and prints the sizes of the
//!   futures as `size FUNCTION<TAB>UN-ANNOTATED<TAB>RETRYABLE` lines.

mod support;

use std::future::Future;
use std::hint::black_box;
use std::io;
use std::process::ExitCode;

use support::{
    Case, Flaky, Impl, Visit, check, check_delays, drive, repeat_delays, runtime, with_call,
};
use tokio::runtime::Runtime;

const USAGE: &str = "usage: instructions [IMPL CASE CALLS]
  CASE a_success | b_three_failures: IMPL plain | hand_loop | hand_fastrand | retryable | policy_retry | backon | backon_nosleep | tokio_retry2
  CASE c_1000_delays:                IMPL hand_smallrng | hand_fastrand | retry_core | backon | tokio_retry2
  no arguments: check every implementation and print the future sizes";

fn main() -> ExitCode {
    // `cargo bench` adds `--bench`: the same as no arguments.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let rt = runtime();
    match args.as_slice() {
        [] => {
            check_all(&rt);
            for (function, plain, retryable) in support::future_sizes() {
                println!("size {function}\t{plain}\t{retryable}");
            }
            ExitCode::SUCCESS
        }
        [imp, case, calls] => {
            let (Some(imp), Ok(calls)) = (Impl::parse(imp), calls.parse::<u64>()) else {
                eprintln!("{USAGE}");
                return ExitCode::FAILURE;
            };
            if case == "c_1000_delays" && Impl::DELAYS.contains(&imp) {
                check_delays(imp);
                repeat_delays(imp, calls);
                return ExitCode::SUCCESS;
            }
            let Some(case) = Case::ALL.into_iter().find(|c| c.name() == case) else {
                eprintln!("{USAGE}");
                return ExitCode::FAILURE;
            };
            if !Impl::CALLS.contains(&imp) {
                eprintln!("{USAGE}");
                return ExitCode::FAILURE;
            }
            check(&rt, imp, case);
            let flaky = Flaky::new(case.failures());
            with_call(
                imp,
                case,
                &flaky,
                Repeat {
                    rt: &rt,
                    flaky: &flaky,
                    calls,
                },
            );
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::FAILURE
        }
    }
}

/// Every implementation on every case, before any figure is taken from this binary.
fn check_all(rt: &Runtime) {
    for case in Case::ALL {
        for imp in Impl::CALLS {
            check(rt, imp, case);
        }
    }
    for imp in Impl::DELAYS {
        check_delays(imp);
    }
}

/// Makes `calls` calls, each from the first attempt, inside the runtime's context.
struct Repeat<'a> {
    rt: &'a Runtime,
    flaky: &'a Flaky,
    calls: u64,
}

impl Visit for Repeat<'_> {
    type Out = ();

    // Each implementation's loop in a function of its own, as a call site is in an
    // application: inlined into one function with every other implementation's loop, a call
    // would be measured under that function's exhausted inlining budget, not its own.
    #[inline(never)]
    fn visit<M, F>(self, mut make: M)
    where
        M: FnMut() -> F,
        F: Future<Output = io::Result<u32>>,
    {
        let _context = self.rt.enter();
        for _ in 0..self.calls {
            self.flaky.reset();
            // Ok: `check` has already shown the value is right; only keep it observable.
            let _ = black_box(drive(self.rt, make()));
        }
    }
}
