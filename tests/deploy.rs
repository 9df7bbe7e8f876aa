//! The deployment files (Dockerfile, deploy/kubernetes/*.yaml, deploy/systemd/*.service) hold
//! together with the binary and the docs: every manifest parses, every command line in them is
//! one the binary accepts, the probes answer, and the autoscaler's query is the one
//! docs/operations.md gives, running on a migrated database as the role the manifests name.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use asyncflow::cli::Cli;
use clap::Parser;
use common::{http_config, request, TestDb};
use serde::Deserialize;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no *.{ext} in {dir}");
    found
}

/// Every document of every Kubernetes manifest, with the file it came from.
fn manifests() -> Vec<(PathBuf, Value)> {
    let mut docs = Vec::new();
    for file in files("deploy/kubernetes", "yaml") {
        let text = read(&file);
        for document in serde_norway::Deserializer::from_str(&text) {
            let doc = Value::deserialize(document).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if doc.is_null() {
                continue;
            }
            for field in ["apiVersion", "kind"] {
                assert!(doc[field].is_string(), "{}: a document without {field}", file.display());
            }
            assert!(doc["metadata"]["name"].is_string(), "{}: a document without a name", file.display());
            docs.push((file.clone(), doc));
        }
    }
    docs
}

fn find<'a>(docs: &'a [(PathBuf, Value)], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes"))
}

/// The containers anywhere in a document (Deployment, Job, ScaledJob alike).
fn containers(doc: &Value) -> Vec<&Value> {
    let mut found = Vec::new();
    let mut stack = vec![doc];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(Value::Array(list)) = map.get("containers") {
                    found.extend(list.iter());
                }
                stack.extend(map.values());
            }
            Value::Array(list) => stack.extend(list.iter()),
            _ => {}
        }
    }
    found
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// The command line parsed by the binary's own parser (the subcommand and every option).
fn accepted(args: &[String], whence: &str) -> Cli {
    let argv = std::iter::once("asyncflow".to_string()).chain(args.iter().cloned());
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{whence}: asyncflow {} is refused: {e}", args.join(" ")))
}

fn secret_data(docs: &[(PathBuf, Value)]) -> BTreeMap<String, String> {
    let secret = find(docs, "Secret", "asyncflow-db");
    secret["stringData"]
        .as_object()
        .expect("the Secret's stringData")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

#[test]
fn every_manifest_parses_and_every_container_runs_a_command_the_binary_accepts() {
    let docs = manifests();
    let secret = secret_data(&docs);
    for (kind, name) in [
        ("Secret", "asyncflow-db"),
        ("Job", "asyncflow-migrate"),
        ("Deployment", "asyncflow-serve"),
        ("Service", "asyncflow"),
        ("Deployment", "asyncflow-maintain"),
        ("TriggerAuthentication", "asyncflow-scaler"),
        ("ScaledJob", "asyncflow-worker"),
    ] {
        find(&docs, kind, name);
    }
    let mut seen = 0;
    for (file, doc) in &docs {
        let whence = format!("{} {}", file.display(), doc["metadata"]["name"]);
        for container in containers(doc) {
            seen += 1;
            assert!(container["image"].as_str().is_some_and(|i| i.starts_with("asyncflow:")), "{whence}");
            accepted(&strings(&container["args"]), &whence);
            for env in container["env"].as_array().into_iter().flatten() {
                if let Some(key) = env["valueFrom"]["secretKeyRef"]["key"].as_str() {
                    assert!(secret.contains_key(key), "{whence}: no key {key} in the Secret");
                }
                if env["name"] == "ASYNCFLOW_LOG_FORMAT" {
                    let value = env["value"].as_str().unwrap_or_default();
                    assert!(
                        <asyncflow::logging::LogFormat as clap::ValueEnum>::from_str(value, false).is_ok(),
                        "{whence}"
                    );
                }
            }
            let security = &container["securityContext"];
            assert_eq!(security["allowPrivilegeEscalation"], false, "{whence}");
        }
        if ["Deployment", "Job", "ScaledJob"].contains(&doc["kind"].as_str().unwrap_or_default()) {
            assert!(!containers(doc).is_empty(), "{whence}: no container");
        }
    }
    assert_eq!(seen, 4, "migrate, serve, maintain, worker");

    // the worker job: a batch job without maintenance, and the database URL of the worker role
    let job = find(&docs, "ScaledJob", "asyncflow-worker");
    let worker = containers(job)[0];
    let cli = accepted(&strings(&worker["args"]), "the ScaledJob");
    let asyncflow::cli::Command::Worker(args) = cli.command else { panic!("the ScaledJob runs a worker") };
    assert!(args.exit_when_idle && args.no_maintenance && args.max_runtime.is_some(), "{args:?}");
}

#[test]
fn the_dockerfile_builds_in_two_stages_and_runs_the_binary_as_a_non_root_user() {
    let text = read(&root().join("Dockerfile"));
    let instructions: Vec<(String, String)> = text
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (word, rest) = l.split_once(' ').unwrap_or((l, ""));
            (word.to_ascii_uppercase(), rest.trim().to_string())
        })
        .collect();
    let of = |word: &str| instructions.iter().filter(|(w, _)| w == word).map(|(_, r)| r.clone()).collect::<Vec<_>>();
    let from = of("FROM");
    assert_eq!(from.len(), 2, "a build stage and a runtime stage: {from:?}");
    assert!(from[0].ends_with(" AS builder"), "{from:?}");
    let user = of("USER");
    let user = user.last().expect("a USER");
    assert!(!user.starts_with('0') && !user.starts_with("root"), "not root: {user}");
    let entrypoint: Vec<String> = serde_json::from_str(&of("ENTRYPOINT")[0]).expect("ENTRYPOINT in exec form");
    assert_eq!(entrypoint, ["/usr/local/bin/asyncflow"]);
    let cmd: Vec<String> = serde_json::from_str(&of("CMD")[0]).expect("CMD in exec form");
    let cli = accepted(&cmd, "the Dockerfile's CMD");
    let asyncflow::cli::Command::Worker(args) = cli.command else { panic!("the image runs a worker by default") };
    assert_eq!(args.functions, Path::new("/functions"));
    assert!(of("COPY").iter().any(|c| c.ends_with(" /functions")), "functions/ baked in at /functions");
    let ignore = read(&root().join(".dockerignore"));
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "the build context leaves target/ out");
}

/// A systemd unit as sections of key = values (a key may repeat).
fn unit(path: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut current = None;
    for (n, line) in read(path).lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.to_string());
            sections.entry(name.to_string()).or_default();
            continue;
        }
        let (key, value) =
            line.split_once('=').unwrap_or_else(|| panic!("{}:{}: not key=value", path.display(), n + 1));
        let section = current.clone().unwrap_or_else(|| panic!("{}:{}: outside a section", path.display(), n + 1));
        sections.entry(section).or_default().push((key.trim().to_string(), value.trim().to_string()));
    }
    sections
}

#[test]
fn the_systemd_units_run_commands_the_binary_accepts_hardened() {
    let units = files("deploy/systemd", "service");
    let names: Vec<String> =
        units.iter().map(|p| p.file_name().unwrap_or_default().to_string_lossy().to_string()).collect();
    assert_eq!(names, ["asyncflow-maintain.service", "asyncflow-serve.service", "asyncflow-worker@.service"]);
    for path in &units {
        let whence = path.display().to_string();
        let sections = unit(path);
        let keys: Vec<&str> = sections.keys().map(String::as_str).collect();
        assert_eq!(keys, ["Install", "Service", "Unit"], "{whence}");
        let service: BTreeMap<&str, &str> = sections["Service"].iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for (key, value) in [
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("PrivateDevices", "yes"),
            ("RestrictNamespaces", "yes"),
            ("CapabilityBoundingSet", ""),
            ("User", "asyncflow"),
            ("Restart", "on-failure"),
        ] {
            assert_eq!(service.get(key).copied(), Some(value), "{whence}: {key}");
        }
        // systemd's specifiers, as they would be expanded for instance 1 on host h
        let exec = service["ExecStart"].replace("%H", "h").replace("%i", "1");
        let mut argv = exec.split_whitespace().map(str::to_string);
        assert_eq!(argv.next().as_deref(), Some("/usr/local/bin/asyncflow"), "{whence}");
        let cli = accepted(&argv.collect::<Vec<_>>(), &whence);
        if let asyncflow::cli::Command::Worker(args) = cli.command {
            // SIGTERM to the worker alone, and more time than its grace before systemd kills
            assert_eq!(service.get("KillMode").copied(), Some("mixed"), "{whence}");
            let stop: u64 = service["TimeoutStopSec"].parse().expect("TimeoutStopSec in seconds");
            assert!(stop > args.shutdown_grace.as_secs(), "{whence}");
        }
    }
}

/// The query of the docs' "Scale from zero" section.
fn docs_query() -> String {
    let docs = read(&root().join("docs/operations.md"));
    let section = docs.split("\n## Scale from zero").nth(1).expect("docs/operations.md: Scale from zero");
    let block = section.split("```sql\n").nth(1).expect("an sql block in Scale from zero");
    block.split("```").next().unwrap_or_default().trim().to_string()
}

#[tokio::test]
async fn the_scalers_query_is_the_docs_one_and_runs_as_the_role_the_manifests_name() {
    let docs = manifests();
    let job = find(&docs, "ScaledJob", "asyncflow-worker");
    let triggers = job["spec"]["triggers"].as_array().expect("triggers");
    assert_eq!(triggers.len(), 1);
    let trigger = &triggers[0];
    assert_eq!(trigger["type"], "postgresql");
    let query = trigger["metadata"]["query"].as_str().expect("the trigger's query");
    assert_eq!(query, docs_query(), "the ScaledJob and docs/operations.md give the same query");
    assert!(trigger["metadata"]["targetQueryValue"].as_str().is_some_and(|v| v.parse::<u32>().is_ok()));

    // the types the query counts are the ones the job's workers run
    let worker = containers(job)[0];
    let cli = accepted(&strings(&worker["args"]), "the ScaledJob");
    let asyncflow::cli::Command::Worker(args) = cli.command else { panic!("a worker") };
    let listed = query.split(" in (").nth(1).and_then(|l| l.split(')').next()).expect("a list of types");
    let mut counted: Vec<String> = listed.split(',').map(|t| t.trim().trim_matches('\'').to_string()).collect();
    let mut run = args.types.clone();
    counted.sort();
    run.sort();
    assert_eq!(counted, run);

    // the role: the user of the connection the TriggerAuthentication hands the scaler
    let auth = find(&docs, "TriggerAuthentication", "asyncflow-scaler");
    let reference = &auth["spec"]["secretTargetRef"][0];
    assert_eq!(reference["parameter"], "connection");
    assert_eq!(reference["name"], "asyncflow-db");
    let url = secret_data(&docs)[reference["key"].as_str().expect("a key")].clone();
    let url = url::Url::parse(&url).expect("the scaler's connection is a URL");
    let role = url.username().to_string();
    assert!(!role.is_empty() && role.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{role}");

    // a migrated database with 3 ready tasks of the counted types and 1 of another
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type(t, '{}') from unnest(array['media', 'flaky', 'echo']) t; \
         select asyncflow.create_task('media', '{}'); \
         select asyncflow.create_task('flaky', '{}') from generate_series(1, 2); \
         select asyncflow.create_task('echo', '{}');",
    )
    .await
    .unwrap();
    // the role as docs/operations.md has it: a login granted asyncflow_client (roles are
    // cluster-wide: another test may have made it already)
    c.batch_execute(&format!(
        "do $$ begin \
           if not exists (select from pg_catalog.pg_roles where rolname = '{role}') then \
             create role {role} login; \
           end if; \
         exception when duplicate_object or unique_violation then null; end $$; \
         grant asyncflow_client to {role};"
    ))
    .await
    .unwrap();
    let mut config = tokio_postgres::Config::from_str(&db.url).expect("the test database's URL");
    config.user(&role);
    let (scaler, connection) = config.connect(tokio_postgres::NoTls).await.expect("connect as the scaler's role");
    tokio::spawn(connection);
    let rows = scaler.simple_query(query).await.unwrap_or_else(|e| panic!("{query} as {role}: {e:?}"));
    let depth: Vec<&str> = rows
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
            _ => None,
        })
        .collect();
    assert_eq!(depth, ["3"], "the ready tasks of the job's types");
}

#[tokio::test]
async fn the_serve_probes_answer_on_the_port_serve_listens_on() {
    let docs = manifests();
    let serve = containers(find(&docs, "Deployment", "asyncflow-serve"))[0];
    let cli = accepted(&strings(&serve["args"]), "the serve Deployment");
    let asyncflow::cli::Command::Serve(args) = cli.command else { panic!("the serve Deployment runs serve") };
    let db = TestDb::new().await;
    let app = asyncflow::http::router(db.pool.clone(), &http_config(&[], 64 * 1024));
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &serve[probe]["httpGet"];
        assert_eq!(get["port"].as_u64(), Some(u64::from(args.listen.port())), "{probe}");
        let path = get["path"].as_str().unwrap_or_else(|| panic!("{probe} has a path"));
        let (status, _, body) = request(&app, "GET", path, None, None, None).await;
        assert_eq!(status, 200, "{probe} {path}: {}", String::from_utf8_lossy(&body));
    }
    assert_eq!(serve["readinessProbe"]["httpGet"]["path"], "/readyz", "ready means the database answers");
}
