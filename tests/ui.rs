//! Every compile error the macros give, as documentation: `tests/ui/*.rs` with the `.stderr`
//! beside each, and pass cases in `tests/ui/pass/`.

// rustc's "the following other types implement trait" lists change with the enabled features,
// so the expected output is for one configuration: `--all-features`, as `scripts/test` runs.
#[test]
#[cfg_attr(
    not(feature = "ui-tests"),
    ignore = "run with `--all-features` (scripts/test does): expected output is for that configuration"
)]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
