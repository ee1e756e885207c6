//! Wall time of one call of each implementation (BENCHMARKS.md, "Wall time"): (a) success on the
//! first attempt, (b) three failures then success with zero delays, (c) 1,000 jittered delays.
//! Every implementation is checked to do the same work before it is measured.
//!
//! `cargo bench --bench retry` (add `-- --quick` for a short look).

mod support;

use std::future::Future;
use std::hint::black_box;
use std::io;
use std::time::Duration;

use criterion::{Bencher, Criterion, criterion_group, criterion_main};
use support::{Case, Flaky, Impl, Visit, check, check_delays, delays, drive, runtime, with_call};
use tokio::runtime::Runtime;

/// Times one call per iteration, each from the first attempt, inside the runtime's context.
struct Time<'a, 'b> {
    bencher: &'a mut Bencher<'b>,
    rt: &'a Runtime,
    flaky: &'a Flaky,
}

impl Visit for Time<'_, '_> {
    type Out = ();

    fn visit<M, F>(self, mut make: M)
    where
        M: FnMut() -> F,
        F: Future<Output = io::Result<u32>>,
    {
        let (rt, flaky) = (self.rt, self.flaky);
        let _context = rt.enter();
        self.bencher.iter(|| {
            flaky.reset();
            drive(rt, make())
        });
    }
}

fn calls(c: &mut Criterion) {
    let rt = runtime();
    for case in Case::ALL {
        let mut group = c.benchmark_group(case.name());
        for imp in Impl::CALLS {
            check(&rt, imp, case);
            let flaky = Flaky::new(case.failures());
            group.bench_function(imp.name(), |b| {
                with_call(
                    imp,
                    case,
                    &flaky,
                    Time {
                        bencher: b,
                        rt: &rt,
                        flaky: &flaky,
                    },
                );
            });
        }
        group.finish();
    }
}

fn delay_iterators(c: &mut Criterion) {
    let mut group = c.benchmark_group("c_1000_delays");
    for imp in Impl::DELAYS {
        check_delays(imp);
        group.bench_function(imp.name(), |b| b.iter(|| delays(black_box(imp))));
    }
    group.finish();
}

fn config() -> Criterion {
    // Short by default: the peers' case (b) sleeps ~3 ms a call, and the figures are checked
    // against the instruction counts anyway. Command-line flags (`--quick`, ...) still apply.
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = calls, delay_iterators
}
criterion_main!(benches);
