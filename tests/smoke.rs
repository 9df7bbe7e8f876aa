use crate::common;

#[tokio::test]
async fn a_test_database_is_migrated_and_isolated() {
    let db = common::TestDb::new().await;
    let c = db.conn().await;
    let row = c.query_one("select count(*) from asyncflow.task_types", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 0);
    let row = c.query_one("select current_setting('search_path')", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "");
}
