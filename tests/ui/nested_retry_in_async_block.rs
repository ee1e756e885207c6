use retry_core::retryable;

struct Client;

impl Client {
    #[retryable(max = 4)]
    async fn fetch_quote(&self, id: u64) -> std::io::Result<u64> {
        Ok(id)
    }

    #[retryable(max = 4)]
    async fn refresh(&self) -> std::io::Result<u64> {
        let later = async { self.fetch_quote(7).await };
        later.await
    }
}

fn main() {}
