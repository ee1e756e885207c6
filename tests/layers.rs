//! The cross-service picture of `examples/layers.rs`: 64 requests at the final system when each
//! layer retries on its own, 4 when `Caller-Retries` is honoured. Real sockets, real clock.

#[allow(dead_code)]
#[path = "../examples/layers.rs"]
mod example;

#[tokio::test]
async fn each_layer_retrying_on_its_own_multiplies_to_64() {
    let outcome = example::run(false).await.unwrap();
    assert_eq!(outcome.final_requests, 64);
    assert_eq!(outcome.status.as_u16(), 503);
}

#[tokio::test]
async fn honouring_caller_retries_sends_the_final_system_4() {
    let outcome = example::run(true).await.unwrap();
    assert_eq!(outcome.final_requests, 4);
    assert_eq!(outcome.status.as_u16(), 503);
}
