//! Enqueue in your own transaction: the task exists if and only if your own write commits.
//!
//! ```sh
//! DATABASE_URL=postgres://me@localhost/app cargo run --example enqueue
//! ```
//! The database must be migrated (`asyncflow migrate`, or the `migrate` call below as its owner).

use asyncflow::db::{self, api};
use asyncflow::task::NewTask;
use serde_json::json;

#[tokio::main]
async fn main() -> asyncflow::Result<()> {
    let url = std::env::var("DATABASE_URL")
        .map_err(|_| asyncflow::Error::Config("set DATABASE_URL to a PostgreSQL database".into()))?;
    db::migrate::migrate(&url).await?;
    let pool = db::pool(&url, 2)?;
    let mut conn = pool.get().await?;
    conn.batch_execute("create table if not exists public.orders (id bigint primary key, customer text not null)")
        .await
        .map_err(asyncflow::Error::from_db)?;

    // One transaction: the application's own row and the task that follows it up. A type nothing
    // has registered yet is registered with the default settings; a worker's settings apply later.
    let tx = conn.transaction().await.map_err(asyncflow::Error::from_db)?;
    tx.execute("insert into public.orders (id, customer) values (42, 'Ada') on conflict (id) do nothing", &[])
        .await
        .map_err(asyncflow::Error::from_db)?;
    let task = NewTask { priority: Some(30), ..NewTask::with_context(json!({"order": 42})) };
    let id = api::create_task(&tx, "invoice", &task).await?;
    tx.commit().await.map_err(asyncflow::Error::from_db)?;
    println!("enqueued {id}");

    // A rolled-back transaction leaves nothing behind.
    let tx = conn.transaction().await.map_err(asyncflow::Error::from_db)?;
    let gone = api::create_task(&tx, "invoice", &NewTask::with_context(json!({"order": 43}))).await?;
    tx.rollback().await.map_err(asyncflow::Error::from_db)?;

    // Reading a task: status, stage, context, result, schedule log.
    let task = api::get_task(&conn, id.as_str()).await?.ok_or_else(|| asyncflow::Error::UnknownTask(id.to_string()))?;
    println!("{id}: status {:?}, stage {}, context {}", task.status, task.stage, task.context);
    let rolled_back = api::get_task(&conn, gone.as_str()).await?;
    println!("{gone} after rollback: {}", if rolled_back.is_none() { "absent" } else { "present" });
    Ok(())
}
