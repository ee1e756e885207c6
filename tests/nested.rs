//! Retry in only one layer, at run time: nesting the compiler cannot see collapses the inner
//! retry to one attempt, so attempts never multiply.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_core::{Policy, retryable, scope};

/// The final system: always down, counts what reaches it.
#[derive(Default)]
struct Dependency {
    calls: AtomicU32,
}

impl Dependency {
    fn call(&self) -> std::io::Result<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(std::io::ErrorKind::ConnectionReset.into())
    }
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[retryable(max = 4, base = "10ms")]
async fn inner(dep: &Dependency) -> std::io::Result<()> {
    dep.call()
}

/// Not annotated: the compiler cannot see the retry inside.
async fn plain_wrapper(dep: &Dependency) -> std::io::Result<()> {
    inner(dep).await
}

#[retryable(max = 4, base = "10ms")]
async fn outer_through_plain_fn(dep: &Dependency) -> std::io::Result<()> {
    plain_wrapper(dep).await
}

trait Service: Send + Sync {
    fn call<'a>(
        &'a self,
        dep: &'a Dependency,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + 'a>>;
}

struct Retrying;

impl Service for Retrying {
    fn call<'a>(
        &'a self,
        dep: &'a Dependency,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + 'a>> {
        Box::pin(inner(dep))
    }
}

#[retryable(max = 4, base = "10ms")]
async fn outer_through_dyn(service: &dyn Service, dep: &Dependency) -> std::io::Result<()> {
    service.call(dep).await
}

#[tokio::test(start_paused = true)]
async fn an_inner_retry_behind_a_plain_fn_makes_one_attempt_per_outer_attempt() {
    let dep = Dependency::default();
    assert!(outer_through_plain_fn(&dep).await.is_err());
    assert_eq!(dep.calls(), 4, "4 outer attempts x 1, not 4 x 4");
}

#[tokio::test(start_paused = true)]
async fn an_inner_retry_behind_a_trait_object_makes_one_attempt_per_outer_attempt() {
    let dep = Dependency::default();
    assert!(outer_through_dyn(&Retrying, &dep).await.is_err());
    assert_eq!(dep.calls(), 4);
}

#[tokio::test(start_paused = true)]
async fn policy_retry_nested_in_an_attribute_retry_collapses_too() {
    static INNER: Policy = Policy::new()
        .max_attempts(4)
        .base(Duration::from_millis(10));
    // Behind a plain fn: awaited directly in the body, it is a compile error
    // (tests/ui/nested_policy_retry.rs).
    async fn closure_retry(dep: &Dependency) -> std::io::Result<()> {
        INNER.retry(|| async { dep.call() }).await
    }
    #[retryable(max = 3, base = "10ms")]
    async fn outer(dep: &Dependency) -> std::io::Result<()> {
        closure_retry(dep).await
    }
    let dep = Dependency::default();
    assert!(outer(&dep).await.is_err());
    assert_eq!(dep.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn policy_retry_single_attempt_makes_one_attempt_inside_a_retry_body() {
    static INNER: Policy = Policy::new()
        .max_attempts(4)
        .base(Duration::from_millis(10));
    #[retryable(max = 3, base = "10ms")]
    async fn outer(dep: &Dependency) -> std::io::Result<()> {
        INNER.retry(|| async { dep.call() }).single_attempt().await
    }
    let dep = Dependency::default();
    assert!(outer(&dep).await.is_err());
    assert_eq!(dep.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_spawned_inside_a_retry_body_is_an_independent_layer() {
    #[retryable(max = 2, base = "10ms")]
    async fn handle(dep: Arc<Dependency>) -> std::io::Result<()> {
        // Compiles: the probe does not look into work handed to another task.
        let audit = tokio::spawn(async move {
            let _ = inner(&dep).await;
        });
        audit.await?;
        Err(std::io::ErrorKind::ConnectionReset.into())
    }
    let dep = Arc::new(Dependency::default());
    assert!(handle(dep.clone()).await.is_err());
    assert_eq!(
        dep.calls(),
        2 * 4,
        "each outer attempt spawns a retry that makes its 4 attempts"
    );
}

#[tokio::test(start_paused = true)]
async fn an_isolated_retry_inside_a_retry_body_makes_all_its_attempts() {
    #[retryable(max = 2, base = "10ms")]
    async fn supervise(dep: &Dependency) -> std::io::Result<()> {
        let _ = scope::isolated(inner(dep)).await;
        assert!(!scope::isolated(async { scope::is_active() }).await);
        assert!(scope::is_active(), "the outer scope is back after it");
        Err(std::io::ErrorKind::ConnectionReset.into())
    }
    let dep = Dependency::default();
    assert!(supervise(&dep).await.is_err());
    assert_eq!(dep.calls(), 2 * 4, "not collapsed to one attempt");
}

#[tokio::test(start_paused = true)]
async fn an_isolated_future_inside_a_carried_scope_is_still_independent() {
    let dep = Arc::new(Dependency::default());
    let task = {
        let dep = dep.clone();
        scope::caller_retries(scope::isolated(async move { inner(&dep).await }))
    };
    assert!(task.await.is_err());
    assert_eq!(dep.calls(), 4);
}

#[tokio::test]
async fn an_assert_on_an_await_in_a_retry_body_shows_the_users_tokens() {
    #[retryable(max = 1)]
    async fn checks() -> std::io::Result<()> {
        assert!(std::future::ready(false).await);
        Ok(())
    }
    let panic = tokio::spawn(checks()).await.unwrap_err().into_panic();
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap();
    assert_eq!(message, "assertion failed: std::future::ready(false).await");
}

#[tokio::test(start_paused = true)]
async fn the_same_retry_outside_any_scope_retries_fully() {
    let dep = Dependency::default();
    assert!(inner(&dep).await.is_err());
    assert_eq!(dep.calls(), 4);
    assert!(!scope::is_active());
}

#[tokio::test(start_paused = true)]
async fn single_attempt_runs_once_without_a_scope() {
    let dep = Dependency::default();
    assert!(inner(&dep).single_attempt().await.is_err());
    assert_eq!(dep.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_spawned_task_does_not_inherit_the_scope_unless_carried() {
    #[retryable(max = 2, base = "10ms")]
    async fn spawns(dep: Arc<Dependency>, carry: bool) -> std::io::Result<()> {
        let task = call_inner(dep.clone());
        let handle = if carry {
            tokio::spawn(scope::in_current_scope(task))
        } else {
            tokio::spawn(task)
        };
        handle.await??;
        Ok(())
    }
    async fn call_inner(dep: Arc<Dependency>) -> std::io::Result<()> {
        inner(&dep).await
    }
    let dep = Arc::new(Dependency::default());
    assert!(spawns(dep.clone(), false).await.is_err());
    assert_eq!(dep.calls(), 2 * 4, "an uncarried spawn retries on its own");
    let dep = Arc::new(Dependency::default());
    assert!(spawns(dep.clone(), true).await.is_err());
    assert_eq!(dep.calls(), 2, "a carried scope collapses the inner retry");
}
