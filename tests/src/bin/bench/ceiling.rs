//! Variant (d), the SQL ceiling: what idem's batched scheme costs with
//! nothing but PostgreSQL (and the provider) — no Kafka, no wasm, no
//! pipeline. The same role, the same statements (one `claim_events` per
//! batch, one INSERT per claimed event, the POST with its
//! `Idempotency-Key`), the same batching (per partition, in order, an
//! event id already in the batch ends it) and the same number of
//! partitions processed at once. With `concurrent` above 1 it does what
//! idem does under `ordering = "key"` with `max_concurrent`: up to that
//! many events of a batch at once, their INSERTs taking the transaction in
//! turn, their POSTs together (every order is a key of its own).

use std::collections::HashSet;
use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt as _;
use sqlx::PgPool;
use tokio::sync::Semaphore;

/// One order as the billing handler reads it.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    event_id: uuid::Uuid,
    order_id: i64,
    customer_id: i64,
    total_amount: f64,
    currency: String,
}

/// How the ceiling runs.
#[derive(Clone, Copy)]
pub struct Shape {
    pub partitions_at_once: usize,
    pub max_events: usize,
    /// Events of one batch at once.
    pub concurrent: usize,
}

/// Processes `partitions` (each a list of payloads, in order) as `shape`
/// says.
pub async fn run(
    pool: &PgPool,
    partitions: Vec<Vec<Vec<u8>>>,
    shape: Shape,
    payment_url: Option<String>,
) -> anyhow::Result<()> {
    let Shape { partitions_at_once, max_events, concurrent } = shape;
    let permits = Arc::new(Semaphore::new(partitions_at_once));
    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    for (partition, payloads) in partitions.into_iter().enumerate() {
        let (pool, permits, http, url) = (pool.clone(), permits.clone(), http.clone(), payment_url.clone());
        tasks.push(tokio::spawn(async move {
            let orders: Vec<Order> =
                payloads.iter().map(|p| serde_json::from_slice(p)).collect::<Result<_, _>>().context("payload")?;
            let mut at = 0;
            while at < orders.len() {
                let mut ids = HashSet::new();
                let batch: Vec<&Order> =
                    orders[at..].iter().take(max_events).take_while(|o| ids.insert(o.event_id)).collect();
                let _permit = permits.acquire().await?;
                at += batch.len();
                one_batch(&pool, partition as i32, &batch, concurrent, &http, url.as_deref()).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

async fn one_batch(
    pool: &PgPool,
    partition: i32,
    batch: &[&Order],
    concurrent: usize,
    http: &reqwest::Client,
    payment_url: Option<&str>,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    let ids: Vec<uuid::Uuid> = batch.iter().map(|o| o.event_id).collect();
    let topics: Vec<&str> = batch.iter().map(|_| "bench").collect();
    let partitions: Vec<i32> = batch.iter().map(|_| partition).collect();
    let offsets: Vec<i64> = (0..batch.len() as i64).collect();
    let hashes: Vec<Vec<u8>> = batch.iter().map(|o| o.event_id.as_bytes().to_vec()).collect();
    let claims: Vec<String> = sqlx::query_scalar("SELECT idem_api.claim_events($1, $2, $3, $4, $5, $6, false)")
        .bind(&ids)
        .bind(&topics)
        .bind(&partitions)
        .bind(&offsets)
        .bind(&hashes)
        // The host names its module version; the check (a row lock on the
        // handler's row and one lookup) is part of what the ceiling should pay.
        .bind(1_i32)
        .fetch_one(&mut *tx)
        .await?;
    let claimed: Vec<&Order> = batch.iter().zip(claims).filter(|(_, c)| c == "claimed").map(|(o, _)| *o).collect();
    let tx = tokio::sync::Mutex::new(tx);
    let (mut waiting, mut running) = (claimed.into_iter(), futures::stream::FuturesUnordered::new());
    loop {
        while running.len() < concurrent.max(1) {
            let Some(order) = waiting.next() else { break };
            running.push(charge(&tx, order, http, payment_url));
        }
        match running.next().await {
            Some(charged) => charged?,
            None => break,
        }
    }
    drop(running);
    tx.into_inner().commit().await?;
    Ok(())
}

/// One order's INSERT, in the batch's transaction, and its POST.
async fn charge(
    tx: &tokio::sync::Mutex<sqlx::Transaction<'_, sqlx::Postgres>>,
    order: &Order,
    http: &reqwest::Client,
    payment_url: Option<&str>,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) \
         VALUES ($1, $2, $3, $4::float8::numeric, $5)",
    )
    .bind(order.event_id)
    .bind(order.order_id)
    .bind(order.customer_id)
    .bind(order.total_amount)
    .bind(&order.currency)
    .execute(&mut **tx.lock().await)
    .await?;
    if let Some(url) = payment_url {
        let body = serde_json::json!({
            "orderId": order.order_id, "amount": order.total_amount, "currency": order.currency,
        });
        http.post(format!("{url}/v1/charges"))
            .header("Idempotency-Key", order.event_id.to_string())
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?
            .error_for_status()?;
    }
    Ok(())
}
