//! Requests generated from the committed `openapi.json` (proptest, a fixed ChaCha seed): for
//! every documented operation, path parameters (real ids and names, unknown ones, junk), query
//! parameters (documented ones with good and bad values, now and then an unknown one), header
//! parameters, and JSON bodies built from the request schema, often mutated: a required field
//! left out, a field the schema does not have, a value of the wrong type, a number beyond f64
//! (`1e400`), nesting hundreds of levels deep, long strings, NUL characters, bodies that are not
//! objects or not JSON. Each goes through the router with a valid bearer token, and its answer
//! must be one the document lists for the operation: never a 5xx, a documented status, a body
//! of the documented media type that validates (JSON Schema 2020-12, the `jsonschema` crate)
//! against the documented schema, an error body exactly `{code, message}`.
//!
//! Half the bodies and parameters keep to values likely to be good (real ids, values within the
//! schema's bounds), so that requests get past validation to the database and the success
//! answers are checked too; the other half roam.
//!
//! The same seed gives the same requests on every run (but for times, which are relative to
//! now; the ids the server hands out may differ too). By hand: `OPENAPI_FUZZ_CASES=N` sends N
//! requests, `OPENAPI_FUZZ_SEED=N` (a number) changes the seed, and `OPENAPI_FUZZ_SURVEY=1` lists
//! every kind of undocumented answer instead of stopping at the first (and shrinking it).
use crate::common;
#[path = "openapi_fuzz/mutate.rs"]
mod mutate;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use asyncflow::http::router;
use axum::http::StatusCode;
use common::{http_config, TestDb};
use mutate::{apply, mutation};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::{BoxedStrategy, Union};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789";
/// Requests per run: about twenty per operation, a few seconds on two cores.
const CASES: u32 = 1000;
/// The ChaCha seed (32 bytes).
const SEED: &[u8; 32] = b"asyncflow openapi fuzz seed 0001";
/// The server's body limit here: a 70,000-character string goes past it (413).
const MAX_BODY: usize = 64 * 1024;

fn committed() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("openapi.json")).expect("openapi.json is JSON")
}

/// One generated request.
#[derive(Clone)]
struct Case {
    /// Index into the operations.
    op: usize,
    method: String,
    /// The path template, for the report.
    template: String,
    uri: String,
    headers: Vec<Header>,
    body: Option<String>,
}

/// A header's name and value (bytes: a value need not be text).
type Header = (String, Vec<u8>);

/// How often each status answered each operation (method, path template).
type Seen = BTreeMap<(String, String), BTreeMap<u16, u32>>;

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cut = |s: &str| {
            if s.chars().count() > 600 {
                format!("{}… ({} characters)", s.chars().take(600).collect::<String>(), s.chars().count())
            } else {
                s.to_string()
            }
        };
        write!(f, "{} {}", self.method, cut(&self.uri))?;
        for (k, v) in &self.headers {
            write!(f, "\n{k}: {}", cut(&String::from_utf8_lossy(v)))?;
        }
        if let Some(b) = &self.body {
            write!(f, "\n\n{}", cut(b))?;
        }
        Ok(())
    }
}

/// What the fixtures made: the real ids and names a request may name.
#[derive(Clone, Default)]
struct Vocab {
    task_ids: Vec<String>,
    run_ids: Vec<String>,
    types: Vec<String>,
    pipelines: Vec<String>,
    nodes: Vec<String>,
    definitions: Vec<Value>,
}

impl Vocab {
    /// Good values for a property or parameter of this name on this path, and plausible ones
    /// that name nothing or break a rule the schema does not say.
    fn known(&self, name: &str, path: &str) -> (Vec<Value>, Vec<Value>) {
        let strings = |v: &[&str]| v.iter().map(|s| json!(s)).collect::<Vec<_>>();
        let owned = |v: &[String]| v.iter().map(|s| json!(s)).collect::<Vec<_>>();
        let run_unknown = "r20300101-00000000000000000000000000000000";
        match name {
            "id" if path.starts_with("/v1/runs") => (owned(&self.run_ids), strings(&[run_unknown])),
            "id" | "task_id" => (owned(&self.task_ids), strings(&["video-1-999999", "nope-1-1", "video-0-1"])),
            "name" if path.starts_with("/v1/pipelines") => (owned(&self.pipelines), strings(&["nope"])),
            "name" | "type" => (owned(&self.types), strings(&["nope", "Bad-Name"])),
            "pipeline" => (owned(&self.pipelines), strings(&["nope"])),
            "node" => (owned(&self.nodes), strings(&["nope"])),
            "worker_id" => (strings(&["w1", "w2"]), vec![]),
            "after" => (owned(&self.task_ids), strings(&["a", "video-1-999999"])),
            "before" => (owned(&self.run_ids), strings(&[run_unknown])),
            "queue_key" => (strings(&["a", "b"]), strings(&[""])),
            "stage" | "initial_stage" => (strings(&["two", "probe"]), strings(&["bad stage"])),
            "status" if path.starts_with("/v1/runs") => (
                strings(&["scheduled", "running", "succeeded", "failed", "timed_out", "cancelled"]),
                strings(&["sideways"]),
            ),
            "status" if path.starts_with("/v1/pipelines") => (strings(&["active", "draft"]), strings(&["retired"])),
            "status" => (strings(&["pending", "running", "succeeded", "failed", "cancelled"]), strings(&["sleeping"])),
            "notify_url" => (strings(&["http://127.0.0.1:9/done"]), strings(&["ftp://example.com/"])),
            "notify_key" | "idempotency_key" | "user_id" | "Idempotency-Key" => (strings(&["k1", "k2"]), vec![]),
            "error" => (strings(&["boom"]), vec![]),
            "traceparent" => (
                strings(&["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]),
                strings(&["00-00000000000000000000000000000000-00f067aa0ba902b7-01", "not-a-traceparent"]),
            ),
            "version" => (vec![json!(1), json!(2)], vec![json!(99)]),
            "claim_seq" => (vec![json!(1), json!(2)], vec![json!(99)]),
            "limit" => (vec![json!(1), json!(2), json!(10), json!(1000)], vec![json!(0), json!(1001)]),
            // a hold that waits: briefly, or the run would wait out hundreds of them
            "wait" if path == "/v1/worker/hold" => {
                (vec![json!(0), json!(0.01), json!(0.05)], vec![json!(-1), json!(30.5), json!(1e308)])
            }
            _ => (vec![], vec![]),
        }
    }
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => resolve(doc, doc.pointer(r.trim_start_matches('#')).expect("a $ref into the document")),
        None => schema,
    }
}

fn weighted(options: Vec<(u32, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    Union::new_weighted(options).boxed()
}

/// Any JSON value, a few levels deep.
fn any_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

fn integer(schema: &Value, known: Vec<Value>) -> BoxedStrategy<Value> {
    let mut edges = vec![0i64, 1, -1, 2, 100, 1001, 31_104_001, i64::from(i32::MAX), i64::from(i32::MIN), 1 << 40];
    for bound in [&schema["minimum"], &schema["maximum"]] {
        if let Some(b) = bound.as_i64() {
            edges.extend([b - 1, b, b + 1]);
        }
    }
    let mut options = vec![
        (3, select(edges).prop_map(Value::from).boxed()),
        (3, (-3i64..40).prop_map(Value::from).boxed()),
        (1, any::<i64>().prop_map(Value::from).boxed()),
        (1, Just(json!(u64::MAX)).boxed()),
    ];
    if !known.is_empty() {
        options.push((5, select(known).boxed()));
    }
    weighted(options)
}

fn number() -> BoxedStrategy<Value> {
    weighted(vec![
        (3, (0f64..100.0).prop_map(Value::from).boxed()),
        (
            2,
            select(vec![0.0, -1.0, 0.5, 1e308, -1e308, 31_536_000.0, 31_536_001.0, 5e-324, 1e15])
                .prop_map(Value::from)
                .boxed(),
        ),
        (1, any::<i32>().prop_map(Value::from).boxed()),
    ])
}

fn date_time() -> BoxedStrategy<Value> {
    let now = chrono::Utc::now();
    weighted(vec![
        (
            4,
            (-86_400i64 * 400..86_400 * 400)
                .prop_map(move |s| json!((now + chrono::Duration::seconds(s)).to_rfc3339()))
                .boxed(),
        ),
        (
            1,
            select(vec![
                "tomorrow",
                "2030-13-01T00:00:00Z",
                "0001-01-01T00:00:00Z",
                "9999-12-31T23:59:59Z",
                "+275760-09-13T00:00:00Z",
                "",
            ])
            .prop_map(Value::from)
            .boxed(),
        ),
    ])
}

fn string(known: Vec<Value>) -> BoxedStrategy<Value> {
    let mut options = vec![
        (2, "[a-z][a-z0-9_]{0,12}".prop_map(Value::from).boxed()),
        (1, "\\PC{0,16}".prop_map(Value::from).boxed()),
        (1, Just(json!("")).boxed()),
        (1, "[a-z]{0,5}".prop_map(|s| json!(format!("{s}\u{0}x"))).boxed()),
        (1, Just(json!("é".repeat(300))).boxed()),
    ];
    if !known.is_empty() {
        options.push((8, select(known).boxed()));
    }
    weighted(options)
}

/// What a value is generated for: the document, the operation's path, the known names, and
/// whether to keep to values that are likely good (`tame`) or roam (`wild`: past limits, junk).
#[derive(Clone)]
struct Gen<'a> {
    doc: &'a Value,
    path: &'a str,
    vocab: &'a Vocab,
    tame: bool,
}

/// Values of `schema`; `name` is the property or parameter it is the value of ("" for a body).
fn value_of(g: &Gen, schema: &Value, name: &str) -> BoxedStrategy<Value> {
    let schema = resolve(g.doc, schema);
    if let Some(values) = schema["enum"].as_array() {
        return select(values.clone()).boxed();
    }
    if let Some(branches) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        return Union::new(branches.iter().map(|b| value_of(g, b, name))).boxed();
    }
    if let Some(parts) = schema["allOf"].as_array() {
        // objects merged (Report: one outcome's fields and the common ones)
        let parts: Vec<_> = parts.iter().map(|p| value_of(g, p, name)).collect();
        return parts
            .prop_map(|values| {
                let mut merged = serde_json::Map::new();
                for v in values {
                    if let Value::Object(m) = v {
                        merged.extend(m);
                    }
                }
                Value::Object(merged)
            })
            .boxed();
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ if g.tame => return select(vec![json!({}), json!({"a": 1}), json!([1, "two"]), json!(null)]).boxed(),
        _ => return any_json(),
    };
    let (good, unknown) = g.vocab.known(name, g.path);
    let mut options = vec![];
    for t in types {
        let s = match t {
            "null" => {
                options.push((1, Just(Value::Null).boxed()));
                continue;
            }
            "boolean" => any::<bool>().prop_map(Value::from).boxed(),
            "integer" if g.tame => match (good.is_empty(), schema["minimum"].as_i64(), schema["maximum"].as_i64()) {
                (false, _, _) => select(good.clone()).boxed(),
                (true, min, max) => (min.unwrap_or(0)..=max.unwrap_or(100)).prop_map(Value::from).boxed(),
            },
            "integer" => integer(schema, [good.clone(), unknown.clone()].concat()),
            "number" if !good.is_empty() => select([good.clone(), unknown.clone()].concat()).boxed(),
            "number" if g.tame => (0f64..100.0).prop_map(Value::from).boxed(),
            "number" => number(),
            "string" if schema["format"] == "date-time" && g.tame => {
                let now = chrono::Utc::now();
                (60i64..86_400).prop_map(move |s| json!((now + chrono::Duration::seconds(s)).to_rfc3339())).boxed()
            }
            "string" if schema["format"] == "date-time" => date_time(),
            "string" if g.tame && !good.is_empty() => select(good.clone()).boxed(),
            "string" if g.tame => "[a-z][a-z0-9_]{0,8}".prop_map(Value::from).boxed(),
            "string" => string([good.clone(), unknown.clone()].concat()),
            "array" => {
                let items = value_of(g, &schema["items"], name);
                prop::collection::vec(items, 0..4).prop_map(Value::Array).boxed()
            }
            "object" => object(g, schema, name),
            other => panic!("type {other}"),
        };
        options.push((4, s));
    }
    weighted(options)
}

/// An object of `schema`: its required properties, and each optional one half the time. An
/// object without properties is a pipeline definition or any object when it is a body (the
/// definition of PUT /v1/pipelines/{name}), a small or any object when it is a field (a
/// context, a run's input).
fn object(g: &Gen, schema: &Value, name: &str) -> BoxedStrategy<Value> {
    let Some(properties) = schema["properties"].as_object() else {
        let small = select(vec![json!({}), json!({"a": 1}), json!({"n": [1, 2], "s": "x"})]).boxed();
        let any_object = prop::collection::btree_map("[a-z]{1,8}", any_json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
            .boxed();
        let definitions = select(g.vocab.definitions.clone()).boxed();
        return match (name.is_empty(), g.tame) {
            (true, true) => definitions,
            (true, false) => weighted(vec![(1, any_object), (1, definitions)]),
            (false, true) => small,
            (false, false) => weighted(vec![(1, any_object), (1, small)]),
        };
    };
    let required: BTreeSet<&str> =
        schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = properties
        .iter()
        .map(|(k, s)| {
            let key = k.clone();
            let value = value_of(g, s, k).prop_map(move |v| (key.clone(), v));
            if required.contains(k.as_str()) {
                value.prop_map(Some).boxed()
            } else {
                prop::option::of(value).boxed()
            }
        })
        .collect();
    fields.prop_map(|fields| Value::Object(fields.into_iter().flatten().collect())).boxed()
}

/// Everything outside the unreserved characters percent-encoded.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A path parameter: mostly a good or plausible value of its schema, sometimes junk (an
/// encoded `/`, invalid UTF-8, 300 characters).
fn path_param(tame: &Gen, wild: &Gen, param: &Value) -> BoxedStrategy<String> {
    let name = param["name"].as_str().unwrap();
    let text = |v: Value| {
        let t = as_text(&v);
        if t.is_empty() {
            "-".to_string()
        } else {
            encode(&t)
        }
    };
    prop_oneof![
        6 => value_of(tame, &param["schema"], name).prop_map(text),
        2 => value_of(wild, &param["schema"], name).prop_map(text),
        1 => "\\PC{1,12}".prop_map(|s| encode(&s)),
        1 => select(vec!["%FF".to_string(), "a%2Fb".into(), "..".into(), "%20".into(), "x".repeat(300)]),
    ]
    .boxed()
}

/// The strategy of one operation's requests.
fn operation(doc: &Value, index: usize, method: &str, path: &str, op: &Value, vocab: &Vocab) -> BoxedStrategy<Case> {
    let tame = Gen { doc, path, vocab, tame: true };
    let wild = Gen { tame: false, ..tame.clone() };
    let params: Vec<&Value> = op["parameters"].as_array().into_iter().flatten().collect();
    let in_path: Vec<(String, BoxedStrategy<String>)> = params
        .iter()
        .filter(|p| p["in"] == "path")
        .map(|p| (p["name"].as_str().unwrap().to_string(), path_param(&tame, &wild, p)))
        .collect();
    let names: Vec<String> = in_path.iter().map(|(n, _)| n.clone()).collect();
    let path_values: Vec<BoxedStrategy<String>> = in_path.into_iter().map(|(_, s)| s).collect();
    let mut query: Vec<BoxedStrategy<Option<(String, String)>>> = params
        .iter()
        .filter(|p| p["in"] == "query")
        .map(|p| {
            let name = p["name"].as_str().unwrap().to_string();
            let value =
                prop_oneof![3 => value_of(&tame, &p["schema"], &name), 1 => value_of(&wild, &p["schema"], &name)];
            let required = p["required"] == json!(true);
            let pair = value.prop_map(move |v| (name.clone(), encode(&as_text(&v))));
            if required {
                prop_oneof![6 => pair.prop_map(Some), 1 => Just(None)].boxed()
            } else {
                prop::option::of(pair).boxed()
            }
        })
        .collect();
    query.push(prop_oneof![8 => Just(None), 1 => Just(Some(("bogus".to_string(), "1".to_string())))].boxed());
    let headers: Vec<BoxedStrategy<Option<Header>>> = params
        .iter()
        .filter(|p| p["in"] == "header")
        .map(|p| {
            let name = p["name"].as_str().unwrap().to_string();
            let value = prop_oneof![
                3 => select([vocab.known(&name, path).0, vocab.known(&name, path).1].concat())
                    .prop_map(|v| as_text(&v).into_bytes()),
                1 => "[ -~]{0,20}".prop_map(String::into_bytes),
                1 => Just(b"caf\xe9".to_vec()),
            ];
            prop::option::of(value.prop_map(move |v| (name.clone(), v))).boxed()
        })
        .collect();
    let body: BoxedStrategy<Option<String>> = match op["requestBody"]["content"]["application/json"]["schema"] {
        ref schema @ Value::Object(_) => {
            let value = prop_oneof![value_of(&tame, schema, ""), value_of(&wild, schema, "")];
            (value, mutation()).prop_map(|(v, m)| Some(apply(v, &m))).boxed()
        }
        _ => Just(None).boxed(),
    };
    let (method, path) = (method.to_uppercase(), path.to_string());
    (path_values, query, headers, body)
        .prop_map(move |(values, query, headers, body)| {
            let mut uri = path.clone();
            for (name, value) in names.iter().zip(&values) {
                uri = uri.replace(&format!("{{{name}}}"), value);
            }
            let query: Vec<String> = query.into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
            if !query.is_empty() {
                uri = format!("{uri}?{}", query.join("&"));
            }
            Case {
                op: index,
                method: method.clone(),
                template: path.clone(),
                uri,
                headers: headers.into_iter().flatten().collect(),
                body,
            }
        })
        .boxed()
}

/// The first line of a problem, its message cut after 160 characters (to group by).
fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().chars().take(160).collect()
}

async fn send(app: &axum::Router, case: &Case) -> (StatusCode, String, Vec<u8>) {
    use tower::ServiceExt;
    let mut req = axum::http::Request::builder()
        .method(case.method.as_str())
        .uri(case.uri.as_str())
        .header("authorization", format!("Bearer {TOKEN}"));
    if case.body.is_some() {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in &case.headers {
        req = req.header(k.as_str(), axum::http::HeaderValue::from_bytes(v).expect("a header value"));
    }
    let body = case.body.clone().map(axum::body::Body::from).unwrap_or_else(axum::body::Body::empty);
    let resp = app.clone().oneshot(req.body(body).expect("a request")).await.expect("the router answers");
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?").to_string())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("the body");
    (status, content_type, bytes.to_vec())
}

/// One documented answer: its media type, and a validator when it is JSON.
struct Answer {
    media: String,
    validator: Option<jsonschema::Validator>,
}

/// The documented answers of each operation, by status.
fn answers(doc: &Value, ops: &[(String, String, Value)]) -> Vec<BTreeMap<String, Vec<Answer>>> {
    ops.iter()
        .map(|(_, _, op)| {
            op["responses"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(status, response)| {
                    let contents = response["content"].as_object().cloned().unwrap_or_default();
                    let answers = contents
                        .iter()
                        .map(|(media, content)| {
                            let validator = media.starts_with("application/json").then(|| {
                                let mut root = content["schema"].clone();
                                root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
                                root["components"] = doc["components"].clone();
                                jsonschema::draft202012::options()
                                    .should_validate_formats(true)
                                    .build(&root)
                                    .expect("the schema compiles")
                            });
                            Answer { media: media.clone(), validator }
                        })
                        .collect();
                    (status.clone(), answers)
                })
                .collect()
        })
        .collect()
}

/// Whether the answer is one the document lists for the operation.
fn check(
    documented: &BTreeMap<String, Vec<Answer>>,
    status: StatusCode,
    content_type: &str,
    bytes: &[u8],
) -> Result<(), String> {
    if status.is_server_error() {
        return Err(format!("a server error: {status} {}", String::from_utf8_lossy(bytes)));
    }
    let Some(answers) = documented.get(status.as_str()) else {
        return Err(format!(
            "status {status} is not documented (documented: {:?}): {}",
            documented.keys().collect::<Vec<_>>(),
            String::from_utf8_lossy(bytes)
        ));
    };
    if answers.is_empty() {
        return Ok(());
    }
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let Some(answer) = answers.iter().find(|a| a.media.split(';').next().unwrap_or_default().trim() == essence) else {
        return Err(format!("content type {content_type:?} is not documented for {status}"));
    };
    let Some(validator) = &answer.validator else {
        return Ok(());
    };
    let body: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("{status}: the body is not JSON ({e}): {bytes:?}"))?;
    let errors: Vec<String> = validator.iter_errors(&body).map(|e| format!("{}: {e}", e.instance_path())).collect();
    if !errors.is_empty() {
        return Err(format!("{status}: the body does not match its schema: {errors:?}\n{body:#}"));
    }
    if status.is_client_error() {
        let keys: BTreeSet<&str> = body.as_object().into_iter().flatten().map(|(k, _)| k.as_str()).collect();
        if keys != BTreeSet::from(["code", "message"]) {
            return Err(format!("{status}: an error body other than {{code, message}}: {body}"));
        }
    }
    Ok(())
}

/// The state requests can name: task types, tasks (some held by w1), a pipeline with a run
/// whose node has a task.
async fn fixtures(app: &axum::Router) -> Vocab {
    let call = |method: &'static str, uri: &'static str, body: Option<Value>| {
        let app = app.clone();
        async move {
            let case = Case {
                op: 0,
                method: method.into(),
                template: uri.into(),
                uri: uri.into(),
                headers: vec![],
                body: body.map(|b| b.to_string()),
            };
            let (s, _, b) = send(&app, &case).await;
            assert!(s.is_success(), "{method} {uri}: {s} {}", String::from_utf8_lossy(&b));
            serde_json::from_slice::<Value>(&b).expect("JSON")
        }
    };
    let mut vocab = Vocab { types: vec!["video".into(), "site".into(), "wf".into()], ..Default::default() };
    call("PUT", "/v1/task-types/video", Some(json!({"max_retry_num": 1}))).await;
    call("PUT", "/v1/task-types/site", Some(json!({"fair_queues": true}))).await;
    call("PUT", "/v1/task-types/wf", Some(json!({}))).await;
    let ids =
        call("POST", "/v1/tasks/bulk", Some(json!({"type": "video", "tasks": [{}, {}, {}, {}, {"priority": 5}]})))
            .await;
    vocab.task_ids.extend(ids["ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()));
    let site = call("POST", "/v1/tasks", Some(json!({"type": "site", "queue_key": "a"}))).await;
    vocab.task_ids.push(site["id"].as_str().unwrap().to_string());
    call("POST", "/v1/worker/hold", Some(json!({"type": "video", "worker_id": "w1", "limit": 3}))).await;
    let definition = json!({"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}], "edges": [["start", "a"], ["a", "end"]]});
    vocab.definitions = vec![definition.clone(), json!({"nodes": [], "edges": []})];
    call("PUT", "/v1/pipelines/p", Some(definition)).await;
    vocab.pipelines.push("p".into());
    vocab.nodes.extend(["a", "start", "end"].map(String::from));
    let run = call("POST", "/v1/runs", Some(json!({"pipeline": "p", "input": {"n": 1}}))).await;
    vocab.run_ids.push(run["run_id"].as_str().unwrap().to_string());
    let node_tasks = call("GET", "/v1/tasks?type=wf", None).await;
    vocab
        .task_ids
        .extend(node_tasks["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_string()));
    vocab
}

#[test]
fn generated_requests_get_documented_answers() {
    let doc = committed();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let db = rt.block_on(TestDb::new());
    let app = router(db.pool.clone(), &http_config(&[TOKEN], MAX_BODY));
    let vocab = rt.block_on(fixtures(&app));

    let mut ops = vec![];
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            ops.push((method.clone(), path.clone(), op.clone()));
        }
    }
    let documented = answers(&doc, &ops);
    let strategy = Union::new_weighted(
        ops.iter()
            .enumerate()
            .map(|(i, (method, path, op))| {
                // operations that take input get more of the requests
                let weight = if op.get("requestBody").is_some() {
                    4
                } else if op.get("parameters").is_some() {
                    2
                } else {
                    1
                };
                (weight, operation(&doc, i, method, path, op, &vocab))
            })
            .collect(),
    );

    let cases = std::env::var("OPENAPI_FUZZ_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(CASES);
    let mut seed = *SEED;
    if let Some(n) = std::env::var("OPENAPI_FUZZ_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        seed[..8].copy_from_slice(&n.to_le_bytes());
    }
    let config = Config {
        cases,
        rng_algorithm: RngAlgorithm::ChaCha,
        failure_persistence: None,
        max_shrink_iters: 200,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let seen: Arc<Mutex<Seen>> = Arc::default();
    // OPENAPI_FUZZ_SURVEY=1: every kind of undocumented answer listed, not only the first
    let survey = std::env::var("OPENAPI_FUZZ_SURVEY").as_deref() == Ok("1");
    let problems: Arc<Mutex<BTreeMap<String, Case>>> = Arc::default();
    let started = Instant::now();
    let result = runner.run(&strategy, |case| {
        let (status, content_type, bytes) = rt.block_on(send(&app, &case));
        *seen
            .lock()
            .unwrap()
            .entry((case.method.clone(), case.template.clone()))
            .or_default()
            .entry(status.as_u16())
            .or_default() += 1;
        let verdict = check(&documented[case.op], status, &content_type, &bytes);
        match verdict {
            Err(e) if survey => {
                problems.lock().unwrap().insert(format!("{} {}: {}", case.method, case.template, first_line(&e)), case);
                Ok(())
            }
            verdict => verdict.map_err(TestCaseError::fail),
        }
    });

    let seen = seen.lock().unwrap().clone();
    let total: u32 = seen.values().flat_map(|s| s.values()).sum();
    eprintln!("{total} requests in {:.1?}, answers by operation:", started.elapsed());
    for ((method, path), statuses) in &seen {
        eprintln!("  {method} {path}: {statuses:?}");
    }
    let problems = problems.lock().unwrap().clone();
    for (problem, case) in &problems {
        eprintln!("\n{problem}\n{case:?}");
    }
    assert!(problems.is_empty(), "{} kinds of undocumented answers", problems.len());
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, case)) => panic!("{reason}\nminimal failing request:\n{case:?}"),
        Err(e) => panic!("{e}"),
    }
    // every operation was called, and the requests reached past the token and the body parser
    assert_eq!(seen.len(), ops.len(), "operations never called: {}", ops.len() - seen.len());
    let statuses: BTreeSet<u16> = seen.values().flat_map(|s| s.keys().copied()).collect();
    for s in [200, 201, 400, 404, 409, 413] {
        assert!(statuses.contains(&s), "no request was answered {s}: {statuses:?}");
    }
}
