//! Every string the duration table (tests/durations) says is invalid, refused at its literal
//! with the grammar's own message; tests/duration_grammar.rs checks this file and its .stderr
//! against the table, a `Policy` read from configuration, and the grammar.

use retry_core::retryable;

#[retryable(base = "")]
async fn case_0() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "5")]
async fn case_1() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "30 seconds")]
async fn case_2() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "1.5s")]
async fn case_3() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "0.5s")]
async fn case_4() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "1,5s")]
async fn case_5() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "1.5ns")]
async fn case_6() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "5x")]
async fn case_7() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "5sec")]
async fn case_8() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "5S")]
async fn case_9() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "5µs")]
async fn case_10() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "30m1h")]
async fn case_11() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "1s1s")]
async fn case_12() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "-1s")]
async fn case_13() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "+1s")]
async fn case_14() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "s")]
async fn case_15() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = " 1s")]
async fn case_16() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "1s ")]
async fn case_17() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "1h 30m")]
async fn case_18() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "99999999999999999999999999999999999999999d")]
async fn case_19() -> std::io::Result<()> {
    Ok(())
}

#[retryable(base = "213503982334602d")]
async fn case_20() -> std::io::Result<()> {
    Ok(())
}

fn main() {}
