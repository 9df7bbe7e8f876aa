//! The function adapters with real processes and a real HTTP server: the JSON contract, exit
//! codes, malformed and oversize replies, timeouts killing the whole process group, signatures.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use asyncflow::function::exec::{ExecFunction, MAX_REPLY_BYTES_DEFAULT};
use asyncflow::function::http::{verify, HttpFunction, SIGNATURE_HEADER};
use asyncflow::function::{Function, StageCall, StageReply};
use serde_json::{json, Value};

fn call(stage: &str, context: Value) -> StageCall {
    StageCall {
        task_id: "fn_test-1-7".into(),
        task_type: "fn_test".into(),
        stage: stage.into(),
        context,
        attempt: 2,
        priority: 5,
        user_id: Some("u".into()),
        deadline: chrono::Utc::now() + chrono::Duration::seconds(60),
        queue_key: None,
        traceparent: None,
        claim_seq: 1_764_045_612_345_678,
        event: None,
        timed_out: None,
        children: None,
        cancel: Default::default(),
        progress: Default::default(),
        checkpoints: Default::default(),
    }
}

/// A temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

fn script(body: &str) -> (TempDir, ExecFunction) {
    let dir = std::env::temp_dir().join(format!("af-fn-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = ExecFunction::new("fn_test", vec![path.display().to_string()], dir.clone(), MAX_REPLY_BYTES_DEFAULT);
    (TempDir(dir), f)
}

fn error_of(reply: &StageReply) -> String {
    match reply {
        StageReply::Failed { error, retry: true } => error.clone(),
        other => panic!("expected a retryable failure, got {other:?}"),
    }
}

#[tokio::test]
async fn an_executable_gets_the_call_on_stdin_and_in_the_environment() {
    let (_dir, f) = script(
        r#"input=$(cat)
printf '{"result": {"stdin": %s, "env": ["%s", "%s", "%s", "%s"], "cwd": "%s"}}' "$input" "$ASYNCFLOW_TASK_ID" "$ASYNCFLOW_TYPE" "$ASYNCFLOW_STAGE" "$ASYNCFLOW_ATTEMPT" "$(pwd)""#,
    );
    let reply = f.call(call("probe", json!({"file": "a.wav"}))).await;
    let StageReply::Succeeded { result } = reply else { panic!("{reply:?}") };
    assert_eq!(result["stdin"]["context"], json!({"file": "a.wav"}));
    assert_eq!(result["stdin"]["stage"], "probe");
    assert_eq!(result["stdin"]["type"], "fn_test");
    assert_eq!(result["stdin"]["attempt"], 2);
    assert_eq!(result["stdin"]["user_id"], "u");
    assert!(result["stdin"]["deadline"].is_string());
    assert_eq!(result["env"], json!(["fn_test-1-7", "fn_test", "probe", "2"]));
    assert!(result["cwd"].as_str().unwrap().contains("af-fn-"), "runs in its folder");
}

#[tokio::test]
async fn an_executable_does_not_inherit_the_worker_credentials() {
    // set in this test binary's environment as a worker would have them (no other test here
    // reads them)
    for (k, v) in [("DATABASE_URL", "postgres://w:pw@db/q"), ("ASYNCFLOW_CALLBACK_SECRET", "s"), ("AF_TEST_KEPT", "k")]
    {
        std::env::set_var(k, v);
    }
    let (_dir, f) = script(
        r#"printf '{"result": ["%s", "%s", "%s", "%s", "%s"]}' "${DATABASE_URL-unset}" "${ASYNCFLOW_TOKEN-unset}" "${ASYNCFLOW_TOKENS-unset}" "${ASYNCFLOW_CALLBACK_SECRET-unset}" "${AF_TEST_KEPT-unset}""#,
    );
    let reply = f.call(call("s", json!({}))).await;
    assert_eq!(reply, StageReply::Succeeded { result: json!(["unset", "unset", "unset", "unset", "k"]) });
}

#[tokio::test]
async fn an_executable_does_not_inherit_the_signing_keys_of_the_folders_http_functions() {
    std::env::set_var("AF_TEST_SIGNING_KEY", "sign-me");
    let dir = TempDir(std::env::temp_dir().join(format!("af-reg-{}", uuid::Uuid::new_v4().simple())));
    for (name, toml, run) in [
        ("hooked", "url = \"http://127.0.0.1:1/x\"\nsecret_env = \"AF_TEST_SIGNING_KEY\"\n", None),
        ("local", "command = [\"./run\"]\n", Some("printf '{\"result\": \"%s\"}' \"${AF_TEST_SIGNING_KEY-unset}\"")),
    ] {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("function.toml"), toml).unwrap();
        if let Some(body) = run {
            std::fs::write(folder.join("run"), format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(folder.join("run"), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let specs = asyncflow::function::registry::load_dir(&dir).unwrap();
    let local = specs.values().find(|s| s.task_type.as_str() == "local").unwrap().function().unwrap();
    assert_eq!(local.call(call("s", json!({}))).await, StageReply::Succeeded { result: json!("unset") });
}

#[tokio::test]
async fn each_reply_form_of_an_executable_is_understood() {
    let cases = [
        (
            r#"echo '{"next_stage": "transform", "context": {"k": 1}}'"#,
            StageReply::Next { next_stage: "transform".into(), context: Some(json!({"k": 1})) },
        ),
        (r#"echo '{"result": {"ok": true}}'"#, StageReply::Succeeded { result: json!({"ok": true}) }),
        (
            r#"echo '{"error": "bad input", "retry": false}'"#,
            StageReply::Failed { error: "bad input".into(), retry: false },
        ),
        (r#"echo '{"error": "try again"}'"#, StageReply::Failed { error: "try again".into(), retry: true }),
        (
            r#"echo '{"later": 30, "context": {"polls": 2}}'"#,
            StageReply::Later { later: 30.0, context: Some(json!({"polls": 2})) },
        ),
        ("echo '  {\"result\": 1}  '; echo", StageReply::Succeeded { result: json!(1) }),
    ];
    for (body, expected) in cases {
        let (_dir, f) = script(body);
        assert_eq!(f.call(call("s", json!({}))).await, expected, "{body}");
    }
}

#[tokio::test]
async fn a_non_zero_exit_is_a_retryable_failure_carrying_the_stderr_tail() {
    let (_dir, f) = script("echo 'first line' >&2; echo 'disk full' >&2; echo '{\"result\": 1}'; exit 3");
    let error = error_of(&f.call(call("s", json!({}))).await);
    assert!(error.contains("exit status 3"), "{error}");
    assert!(error.contains("disk full"), "{error}");
}

#[tokio::test]
async fn stderr_that_is_not_utf8_or_has_no_line_end_does_not_stop_the_function() {
    // A Latin-1 byte on stderr, then more stderr: reading stopped at the bad byte before, the
    // pipe closed and the next write killed the function with SIGPIPE.
    let (_dir, f) = script(
        "printf 'caf\\351\\n' >&2; printf 'still logging\\n' >&2; head -c 20000 /dev/zero | tr '\\0' 'y' >&2; \
         echo '{\"result\": \"ok\"}'",
    );
    assert_eq!(f.call(call("s", json!({}))).await, StageReply::Succeeded { result: json!("ok") });
    // A failure's message still carries the tail, the bad byte replaced.
    let (_dir, f) = script("printf 'bad \\377 byte\\n' >&2; exit 2");
    let error = error_of(&f.call(call("s", json!({}))).await);
    assert!(error.contains("exit status 2") && error.contains("bad \u{fffd} byte"), "{error}");
}

#[tokio::test]
async fn malformed_and_oversize_replies_are_failures() {
    let (_dir, f) = script("echo 'this is not json'");
    assert!(error_of(&f.call(call("s", json!({}))).await).contains("not JSON"));
    let (_dir, f) = script(r#"echo '{"result": 1, "error": "both"}'"#);
    assert!(error_of(&f.call(call("s", json!({}))).await).contains("malformed reply"));
    let (_dir, f) = script("echo '[1, 2]'");
    assert!(error_of(&f.call(call("s", json!({}))).await).contains("malformed reply"));
    // `retry` belongs to the error form only
    let (_dir, f) = script(r#"echo '{"result": 1, "retry": "banana"}'"#);
    let e = error_of(&f.call(call("s", json!({}))).await);
    assert!(e.contains("malformed reply") && e.contains("unknown field \"retry\""), "{e}");
    let (_dir, f) = script("head -c 2000000 /dev/zero | tr '\\0' 'x'");
    assert!(error_of(&f.call(call("s", json!({}))).await).contains("larger than 1048576 bytes"));
    let (_dir, f) = script("exit 0");
    assert!(error_of(&f.call(call("s", json!({}))).await).contains("not JSON"));
}

#[tokio::test]
async fn a_reply_past_the_limit_ends_the_call_at_once() {
    // Past the limit the call has failed whatever comes next; a function that then goes on
    // without writing (no SIGPIPE to stop it) used to keep the call open until its timeout.
    let (_dir, f) = script("head -c 1100000 /dev/zero | tr '\\0' 'x'; sleep 300");
    let reply = tokio::time::timeout(Duration::from_secs(5), f.call(call("s", json!({}))))
        .await
        .expect("the call should end once the reply is past the limit");
    assert!(error_of(&reply).contains("larger than 1048576 bytes"), "{reply:?}");
}

#[tokio::test]
async fn a_function_that_ignores_stdin_still_works() {
    let (_dir, f) = script("echo '{\"result\": \"ignored the call\"}'");
    let big = json!({"blob": "y".repeat(300_000)});
    assert_eq!(f.call(call("s", big)).await, StageReply::Succeeded { result: json!("ignored the call") });
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

async fn read_pids(dir: &Path) -> Vec<i32> {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(dir.join("pids")) {
            let pids: Vec<i32> = text.split_whitespace().filter_map(|p| p.parse().ok()).collect();
            if pids.len() == 2 {
                return pids;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the script did not write its pids");
}

#[tokio::test]
async fn an_abandoned_call_kills_the_whole_process_group_leaving_no_orphan() {
    let (dir, f) = script("sleep 300 & echo \"$$ $!\" > pids; wait");
    let timed_out = tokio::time::timeout(Duration::from_millis(1500), f.call(call("s", json!({})))).await;
    assert!(timed_out.is_err(), "the call should still be running");
    let pids = read_pids(&dir).await;
    for _ in 0..250 {
        if pids.iter().all(|p| !alive(*p)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("processes {pids:?} outlived the abandoned call");
}

#[tokio::test]
async fn a_background_child_holding_stdout_does_not_hold_the_call_open_after_the_function_exits() {
    // The function replies and exits; the program it left running inherited its stdout (and
    // stdin, stderr), so the pipes never reached end of file and the call ran until its timeout.
    let (dir, f) = script("sleep 300 & echo \"$!\" > pids; echo '{\"result\": \"replied\"}'");
    let reply = tokio::time::timeout(Duration::from_secs(5), f.call(call("s", json!({"blob": "y".repeat(300_000)}))))
        .await
        .expect("the call should end when the function exits");
    assert_eq!(reply, StageReply::Succeeded { result: json!("replied") });
    let pid: i32 = std::fs::read_to_string(dir.join("pids")).unwrap().trim().parse().unwrap();
    for _ in 0..250 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "the background child {pid} outlived the call");

    // One that left its process group cannot be killed with it: the call still ends, soon
    // after the function exits, with the reply it wrote.
    let (dir, f) = script("setsid sh -c 'echo $$ > pids; exec sleep 300' & echo '{\"result\": \"replied\"}'");
    let reply = tokio::time::timeout(Duration::from_secs(5), f.call(call("s", json!({}))))
        .await
        .expect("the call should end soon after the function exits");
    if let Ok(text) = std::fs::read_to_string(dir.join("pids")) {
        if let Ok(pid) = text.trim().parse::<i32>() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    assert_eq!(reply, StageReply::Succeeded { result: json!("replied") });
}

mod http {
    use std::sync::{Arc, Mutex};

    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;

    use super::*;

    async fn serve(secret: &'static [u8], seen: Arc<Mutex<Vec<Value>>>) -> String {
        let app = axum::Router::new()
            .route(
                "/stage",
                post(move |headers: HeaderMap, body: Bytes| {
                    let seen = seen.clone();
                    async move {
                        let sig = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
                        if !verify(secret, &body, sig) {
                            return (StatusCode::UNAUTHORIZED, "bad signature".to_string());
                        }
                        let call: Value = serde_json::from_slice(&body).unwrap();
                        seen.lock().unwrap().push(call.clone());
                        let reply = match call["stage"].as_str() {
                            Some("a") => json!({"next_stage": "b", "context": {"from": "a"}}),
                            Some("boom") => return (StatusCode::INTERNAL_SERVER_ERROR, "database unavailable".into()),
                            Some("huge") => json!({"result": "z".repeat(2_000_000)}),
                            Some("bad") => json!({"nonsense": true}),
                            _ => json!({"result": {"stage": call["stage"]}}),
                        };
                        (StatusCode::OK, reply.to_string())
                    }
                }),
            )
            .route("/moved", post(|| async { axum::response::Redirect::to("/stage") }))
            .route(
                "/slow",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    "{}"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    fn function(base: &str, path: &str, secret: &[u8]) -> HttpFunction {
        HttpFunction::new(
            format!("{base}{path}").parse().unwrap(),
            Some(Duration::from_secs(2)),
            Some(secret.to_vec()),
            MAX_REPLY_BYTES_DEFAULT,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn an_http_function_gets_a_signed_call_and_its_reply_is_read() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let base = serve(b"topsecret", seen.clone()).await;
        let f = function(&base, "/stage", b"topsecret");
        assert_eq!(
            f.call(call("a", json!({"x": 1}))).await,
            StageReply::Next { next_stage: "b".into(), context: Some(json!({"from": "a"})) }
        );
        assert_eq!(f.call(call("z", json!({}))).await, StageReply::Succeeded { result: json!({"stage": "z"}) });
        let calls = seen.lock().unwrap().clone();
        assert_eq!(calls[0]["context"], json!({"x": 1}));
        assert_eq!(calls[0]["task_id"], "fn_test-1-7");
    }

    #[tokio::test]
    async fn a_failure_to_call_does_not_show_the_credentials_in_the_url() {
        // The error is written on the task, which every client that may read it sees.
        let f = HttpFunction::new(
            "http://hook:s3cretpw@127.0.0.1:1/x?token=t0ken".parse().unwrap(),
            Some(Duration::from_secs(2)),
            None,
            MAX_REPLY_BYTES_DEFAULT,
        )
        .unwrap();
        let e = error_of(&f.call(call("z", json!({}))).await);
        assert!(e.contains("calling http://127.0.0.1:1/x"), "{e}");
        assert!(!e.contains("s3cretpw") && !e.contains("t0ken"), "{e}");
    }

    #[tokio::test]
    async fn a_wrong_signature_non_2xx_bad_or_huge_bodies_and_timeouts_are_failures() {
        let base = serve(b"topsecret", Arc::new(Mutex::new(Vec::new()))).await;
        let wrong = function(&base, "/stage", b"not the secret");
        assert!(error_of(&wrong.call(call("z", json!({}))).await).contains("HTTP 401"));
        let f = function(&base, "/stage", b"topsecret");
        let e = error_of(&f.call(call("boom", json!({}))).await);
        assert!(e.contains("HTTP 500") && e.contains("database unavailable"), "{e}");
        assert!(error_of(&f.call(call("huge", json!({}))).await).contains("larger than"));
        assert!(error_of(&f.call(call("bad", json!({}))).await).contains("malformed reply"));
        // a redirect is not followed: the answer is a 303, not the reply of a GET elsewhere
        let moved = function(&base, "/moved", b"topsecret");
        let e = error_of(&moved.call(call("z", json!({}))).await);
        assert!(e.contains("HTTP 303"), "{e}");
        let slow = function(&base, "/slow", b"topsecret");
        assert!(!error_of(&slow.call(call("z", json!({}))).await).is_empty());
        let nowhere = function("http://127.0.0.1:1", "/x", b"s");
        assert!(error_of(&nowhere.call(call("z", json!({}))).await).contains("calling http://127.0.0.1:1/x"));
    }
}
