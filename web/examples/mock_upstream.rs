//! A minimal OpenAI-compatible upstream that answers every chat or completion request at once with a
//! fixed body (streamed when asked), for measuring the gateway's own overhead against a direct path.
//!
//! `cargo run --release -p strata-web --example mock_upstream -- 127.0.0.1:9001`

use axum::{
    Router,
    body::{Body, Bytes},
    http::header,
    response::{IntoResponse, Response},
    routing::{get, post},
};

const ANSWER: &str = r#"{"id":"cmpl-mock","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}"#;

const STREAM: &str = concat!(
    "data: {\"id\":\"cmpl-mock\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
    "data: {\"id\":\"cmpl-mock\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there!\"},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"cmpl-mock\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n",
    "data: [DONE]\n\n",
);

async fn answer(body: Bytes) -> Response {
    let stream = body.windows(13).any(|w| w == b"\"stream\":true");
    if stream {
        (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from(STREAM),
        )
            .into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], ANSWER).into_response()
    }
}

async fn models() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#,
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9001".into());
    let app = Router::new()
        .route("/v1/chat/completions", post(answer))
        .route("/v1/completions", post(answer))
        .route("/v1/models", get(models));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}
