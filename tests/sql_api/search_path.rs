//! create_task in a hostile session: the caller's search_path and collation reach nothing of it.
use super::*;

/// Operators and functions of a schema put before pg_catalog in the caller's search_path, one
/// for each that create_task's direct path uses (and a type for each type name it declares):
/// each raises, so reaching one fails the call.
fn hijacking_schema() -> String {
    let mut sql = String::from(
        "create schema hijack; \
         create type hijack.text as (x int); create type hijack.jsonb as (x int); \
         create type hijack.regclass as (x int); create type hijack.jsonpath as (x int); \
         create type hijack.timestamptz as (x int);",
    );
    // (name, argument types, return type): functions of pg_catalog that create_task calls
    let functions = [
        ("now", "", "timestamptz"),
        ("jsonb_typeof", "pg_catalog.jsonb", "pg_catalog.text"),
        ("pg_column_size", "pg_catalog.jsonb", "int"),
        ("length", "pg_catalog.text", "int"),
        ("nextval", "pg_catalog.regclass", "bigint"),
        ("make_interval", "secs double precision", "interval"),
        ("pg_try_advisory_xact_lock", "int, int", "boolean"),
        ("hashtext", "pg_catalog.text", "int"),
        ("pg_notify", "pg_catalog.text, pg_catalog.text", "void"),
        // the JSON rule (asyncflow.json_ok, inlined)
        ("jsonb_path_exists", "pg_catalog.jsonb, pg_catalog.jsonpath", "boolean"),
    ];
    for (name, args, returns) in functions {
        sql += &format!(
            " create function hijack.{name}({args}) returns {returns} language plpgsql as \
             $$ begin raise exception 'hijacked: {name}'; end $$;"
        );
    }
    // (operator, left, right, return type): every operator the direct path applies
    let operators = [
        ("=", "pg_catalog.text", "pg_catalog.text", "boolean"),
        ("=", "pg_catalog.jsonb", "pg_catalog.jsonb", "boolean"),
        ("~", "pg_catalog.text", "pg_catalog.text", "boolean"),
        ("||", "pg_catalog.text", "pg_catalog.text", "pg_catalog.text"),
        (">=", "int", "int", "boolean"),
        ("<=", "int", "int", "boolean"),
        (">=", "timestamptz", "timestamptz", "boolean"),
        ("<=", "timestamptz", "timestamptz", "boolean"),
        ("-", "timestamptz", "interval", "timestamptz"),
    ];
    for (n, (op, left, right, returns)) in operators.iter().enumerate() {
        sql += &format!(
            " create function hijack.op_{n}({left}, {right}) returns {returns} language plpgsql as \
             $$ begin raise exception 'hijacked: operator {op}'; end $$; \
             create operator hijack.{op} (leftarg = {left}, rightarg = {right}, function = hijack.op_{n});"
        );
    }
    sql
}

#[tokio::test]
async fn create_task_reaches_nothing_of_the_callers_search_path() {
    // create_task is SECURITY DEFINER without a SET search_path: every name in its direct
    // path is schema-qualified, so a caller's own operators and functions are never run with the
    // owner's rights.
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({})).await;
    c.batch_execute(&hijacking_schema()).await.unwrap();
    // the traps work: an unqualified use reaches them
    c.batch_execute("set search_path = hijack, pg_catalog").await.unwrap();
    let trapped = c.query_one("select 'a'::pg_catalog.text = 'a'::pg_catalog.text", &[]).await.unwrap_err();
    let message = trapped.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert_eq!(message, "hijacked: operator =");

    // this connection compiles create_task under the hijacking path (its first call here)
    let plain: String = c.query_one("select asyncflow.create_task('video')", &[]).await.unwrap().get(0);
    let full: String = c
        .query_one(
            "select asyncflow.create_task('video', '{\"a\": 1}'::pg_catalog.jsonb, 30, \
             '2030-01-01 00:00:00+00'::pg_catalog.timestamptz, 'probe', null, 'u1')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let null_context: String =
        c.query_one("select asyncflow.create_task('video', 'null'::pg_catalog.jsonb)", &[]).await.unwrap().get(0);
    // the clock's range (asyncflow.now_ok, inlined) on the direct path
    let clocked: String = c
        .query_one(
            "select asyncflow.create_task('video', '{\"n\": [1e300]}'::pg_catalog.jsonb, \
             p_now => '2030-01-01 00:00:00+00'::pg_catalog.timestamptz)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // a queue key's check (length, >=, <=) on the direct path
    let with_key: String =
        c.query_one("select asyncflow.create_task('video', queue_key => 'site-a')", &[]).await.unwrap().get(0);
    // the general path (SET search_path of its own): an idempotency key, and a refusal
    let keyed: String =
        c.query_one("select asyncflow.create_task('video', idempotency_key => 'k1')", &[]).await.unwrap().get(0);
    let refused = c.query_one("select asyncflow.create_task('video', priority => -1)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&refused), "AF004", "{refused:?}");

    c.batch_execute("reset search_path").await.unwrap();
    let t = task(&c, &full).await;
    assert_eq!(t["stage"], "probe");
    assert_eq!(t["priority"], 30);
    assert_eq!(t["user_id"], "u1");
    assert_eq!(t["context"], json!({"a": 1}));
    assert_eq!(
        at(&t, "order_time"),
        "2030-01-01T00:00:00Z".parse::<chrono::DateTime<chrono::Utc>>().unwrap() - secs(30.0)
    );
    assert_eq!(task(&c, &null_context).await["context"], json!({}));
    assert_eq!(task(&c, &with_key).await["queue_key"], "site-a");
    assert_eq!(
        at(&task(&c, &clocked).await, "created_at"),
        "2030-01-01T00:00:00Z".parse::<chrono::DateTime<chrono::Utc>>().unwrap()
    );
    for id in [&plain, &keyed] {
        assert_eq!(task(&c, id).await["status"], "pending", "{id}");
    }
}

#[tokio::test]
async fn create_task_takes_the_type_under_its_own_collation_not_the_callers() {
    // A plpgsql function's text parameters take the collation of the call's arguments, and a
    // caller may create a nondeterministic one in a schema of its own: under ICU's
    // und-u-ka-shifted punctuation is ignored, so 'a_b' = 'ab'. The type's row looked up must
    // still be a_b's own, on the direct path, the general one and in create_tasks.
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "ab", json!({"initial_stage": "of_ab"})).await;
    register(&c, "a_b", json!({"initial_stage": "of_a_b"})).await;
    c.batch_execute(
        "create schema mine; \
         create collation mine.ign (provider = icu, locale = 'und-u-ka-shifted', deterministic = false)",
    )
    .await
    .unwrap();
    let equal: bool = c.query_one("select 'a_b' = 'ab' collate mine.ign", &[]).await.unwrap().get(0);
    assert!(equal, "the collation ignores punctuation");
    let mut ids = Vec::new();
    for sql in [
        "select asyncflow.create_task('a_b' collate mine.ign)",
        "select asyncflow.create_task('a_b' collate mine.ign, idempotency_key => 'k1')",
        "select asyncflow.create_tasks('a_b' collate mine.ign, '[{}]')",
    ] {
        ids.push(c.query_one(sql, &[]).await.unwrap().get::<_, String>(0));
    }
    for id in &ids {
        assert_eq!(task(&c, id).await["stage"], "of_a_b", "{id} was written with another type's settings");
    }
    // and a_b's own sequence gave the ids: the plain creates that follow are not refused
    for _ in 0..3 {
        let id: String = c.query_one("select asyncflow.create_task('a_b')", &[]).await.unwrap().get(0);
        assert_eq!(task(&c, &id).await["stage"], "of_a_b");
    }
}
