//! Malformed reports are refused whole, naming the report and the field.
use super::*;

/// A task of a new type `clip`, claimed by worker `w1`: its id and claim_seq.
async fn claimed_clip(c: &tokio_postgres::Client) -> (String, i64) {
    register(c, "clip", json!({})).await;
    let id: String = c.query_one("select asyncflow.create_task('clip')", &[]).await.unwrap().get(0);
    let claimed = c.query("select claim_seq from asyncflow.claim_tasks('clip', 'w1', 1)", &[]).await.unwrap();
    (id, claimed[0].get(0))
}

#[tokio::test]
async fn malformed_reports_are_refused_whole_naming_the_report_and_field() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let (id, seq) = claimed_clip(&c).await;
    let good = json!({"task_id": id, "claim_seq": seq, "outcome": "succeed"});
    for (bad, says) in [
        (json!({"task_id": "clip-1", "claim_seq": seq, "outcome": "succeed"}), "reports[1]: task_id must be a task id"),
        (json!({"task_id": "Clip-1-1", "claim_seq": seq, "outcome": "succeed"}), "task_id must be a task id"),
        (json!({"task_id": "clip-1-99999999999999999999", "claim_seq": 1, "outcome": "succeed"}), "task_id"),
        (json!({"task_id": id, "claim_seq": 1.5, "outcome": "succeed"}), "claim_seq must be an integer"),
        (json!({"task_id": id, "claim_seq": seq, "outcome": "fail", "error": 7}), "error must be a string"),
        (json!({"task_id": id, "claim_seq": seq, "outcome": "advance", "stage": ["x"]}), "stage"),
        (json!({"task_id": id, "claim_seq": seq, "outcome": "succeed", "delay": "soon"}), "delay must be a number"),
    ] {
        let err = c
            .query("select * from asyncflow.report_tasks('w1', $1)", &[&json!([good, bad])])
            .await
            .expect_err("a malformed report is refused");
        assert_eq!(sqlstate(&err), "AF006", "{err}");
        let text = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(text.contains(says), "{text:?} should say {says:?}");
        // nothing applied: the good report in the same batch did not land
        assert_eq!(task(&c, &id).await["status"], "running");
    }
    // JSON numbers beyond a double precision's range: refused by name, not with a raw 22003
    // (the JSON is sent as text: serde_json cannot hold them)
    for delay in ["1e400", "-1e400", "31536001"] {
        let reports =
            format!(r#"[{good}, {{"task_id": "{id}", "claim_seq": {seq}, "outcome": "later", "delay": {delay}}}]"#);
        let err = c
            .query("select * from asyncflow.report_tasks('w1', $1::text::jsonb)", &[&reports])
            .await
            .expect_err("an out-of-range delay is refused");
        assert_eq!(sqlstate(&err), "AF006", "{err}");
        let text = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(text.contains("reports[1]: delay must be a number of seconds between 0 and 31536000"), "{text}");
        assert_eq!(task(&c, &id).await["status"], "running");
    }
    // one that underflows is a delay of zero
    let reports = format!(r#"[{{"task_id": "{id}", "claim_seq": {seq}, "outcome": "later", "delay": 1e-400}}]"#);
    let rows =
        c.query("select accepted from asyncflow.report_tasks('w1', $1::text::jsonb)", &[&reports]).await.unwrap();
    assert!(rows[0].get::<_, bool>(0));
    assert_eq!(task(&c, &id).await["status"], "pending");
}

#[tokio::test]
async fn malformed_report_arrays_are_refused_whole_naming_the_report_and_field() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let (id, seq) = claimed_clip(&c).await;
    let call = "select * from asyncflow.report_task_arrays('w1', $1::text[], $2::bigint[], $3::text[], $4::text[], \
                null, null, null, null, $5::float8[])";
    let no_stage: Vec<Option<&str>> = vec![None, None];
    let no_delay: Vec<Option<f64>> = vec![None, None];
    let bad_ids: Vec<Option<&str>> = vec![Some(&id), Some("Clip-1-1")];
    let null_outcome: Vec<Option<&str>> = vec![Some("succeed"), None];
    let later_delay: Vec<Option<f64>> = vec![None, Some(-1.0)];
    // (task ids, claim_seqs, outcomes, stages, delays, words of the refusal)
    type Case<'a> =
        (Vec<Option<&'a str>>, Vec<i64>, Vec<Option<&'a str>>, Vec<Option<&'a str>>, Vec<Option<f64>>, &'a str);
    let cases: Vec<Case> = vec![
        (vec![Some(&id)], vec![seq, seq], vec![Some("succeed")], vec![None], vec![None], "one element per report"),
        (bad_ids, vec![seq, seq], vec![Some("succeed"); 2], no_stage.clone(), no_delay.clone(), "reports[1]: task_id"),
        (vec![Some(&id); 2], vec![seq, seq], null_outcome, no_stage.clone(), no_delay.clone(), "reports[1]: outcome"),
        (
            vec![Some(&id); 2],
            vec![seq, seq],
            vec![Some("succeed"), Some("advance")],
            vec![None, Some("bad stage!")],
            no_delay,
            "reports[1]: stage must match",
        ),
        (vec![Some(&id); 2], vec![seq, seq], vec![Some("succeed"), Some("later")], no_stage, later_delay, "delay"),
    ];
    for (ids, seqs, outcomes, stages, delays, says) in cases {
        let err = c.query(call, &[&ids, &seqs, &outcomes, &stages, &delays]).await.expect_err("refused");
        assert_eq!(sqlstate(&err), "AF006", "{err}");
        let text = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(text.contains(says), "{text:?} should say {says:?}");
        // nothing applied: the good report in the same batch did not land
        assert_eq!(task(&c, &id).await["status"], "running");
    }
    // a two-dimensional array is refused, not flattened
    let err = c
        .query(
            "select * from asyncflow.report_task_arrays('w1', array[[$1::text]], array[[$2::bigint]], array[['succeed']])",
            &[&id, &seq],
        )
        .await
        .expect_err("refused");
    assert_eq!(sqlstate(&err), "AF006", "{err}");
    // and the good report alone lands
    let rows = c
        .query(
            "select accepted, status::text from asyncflow.report_task_arrays('w1', $1, $2, $3)",
            &[&vec![id.as_str()], &vec![seq], &vec!["succeed"]],
        )
        .await
        .unwrap();
    assert!(rows[0].get::<_, bool>(0));
    assert_eq!(rows[0].get::<_, String>(1), "succeeded");
    assert_eq!(task(&c, &id).await["status"], "succeeded");
}
