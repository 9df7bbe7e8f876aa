//! Mutations of generated request bodies: a field left out, one the schema does not have, a
//! value of the wrong type, a number beyond f64, deep nesting, long strings, NUL characters, or
//! a body that is not an object or not JSON.
use super::*;

/// A change to a generated body, applied to one of its objects (the body or one inside it).
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    None,
    /// Leave out one field.
    Drop(usize, usize),
    /// Add a field the schema does not have.
    Extra(usize, Value),
    /// One field's value of another type.
    WrongType(usize, usize, Value),
    /// One field's value a number beyond f64 (`1e400`).
    Huge(usize, usize),
    /// One field's value arrays nested this deep.
    Deep(usize, usize, usize),
    /// One field's value a string of this many characters.
    Long(usize, usize, usize),
    /// One field's value a string with a NUL character.
    Nul(usize, usize),
    /// The body replaced by this text.
    Raw(String),
}

const HUGE: &str = "\u{1}huge\u{1}";

pub(super) fn mutation() -> BoxedStrategy<Mutation> {
    let at = || (any::<usize>(), any::<usize>());
    let wrong = select(vec![json!(true), json!(5), json!(-1.5), json!("s"), json!([]), json!({}), json!(null)]);
    prop_oneof![
        12 => Just(Mutation::None),
        2 => at().prop_map(|(o, f)| Mutation::Drop(o, f)),
        2 => (any::<usize>(), any_json()).prop_map(|(o, v)| Mutation::Extra(o, v)),
        3 => (at(), wrong).prop_map(|((o, f), v)| Mutation::WrongType(o, f, v)),
        1 => at().prop_map(|(o, f)| Mutation::Huge(o, f)),
        1 => (at(), select(vec![10usize, 65, 129, 1000])).prop_map(|((o, f), d)| Mutation::Deep(o, f, d)),
        1 => (at(), select(vec![256usize, 70_000])).prop_map(|((o, f), n)| Mutation::Long(o, f, n)),
        1 => at().prop_map(|(o, f)| Mutation::Nul(o, f)),
        2 => select(vec!["", "[]", "[1]", "null", "1", "\"s\"", "{", "{\"type\": }", "{\"a\": 1} x", "\u{0}"])
            .prop_map(|s| Mutation::Raw(s.to_string())),
    ]
    .boxed()
}

/// JSON pointers of every object in `value`, itself first.
fn objects(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(m) => {
            out.push(at.clone());
            for (k, v) in m {
                objects(v, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                objects(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

pub(super) fn apply(mut body: Value, m: &Mutation) -> String {
    let (object, field) = match m {
        Mutation::None => return body.to_string(),
        Mutation::Raw(text) => return text.clone(),
        Mutation::Extra(o, _) => (*o, 0),
        Mutation::Drop(o, f)
        | Mutation::WrongType(o, f, _)
        | Mutation::Huge(o, f)
        | Mutation::Deep(o, f, _)
        | Mutation::Long(o, f, _)
        | Mutation::Nul(o, f) => (*o, *f),
    };
    let mut pointers = vec![];
    objects(&body, String::new(), &mut pointers);
    let Some(target) = pointers.get(object % pointers.len().max(1)).cloned() else {
        return body.to_string();
    };
    let Some(Value::Object(map)) = body.pointer_mut(&target) else {
        return body.to_string();
    };
    if let Mutation::Extra(_, v) = m {
        map.insert("bogus_field".to_string(), v.clone());
        return body.to_string();
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    let key = if keys.is_empty() { "bogus_field".to_string() } else { keys[field % keys.len()].clone() };
    match m {
        Mutation::Drop(..) => {
            map.remove(&key);
        }
        Mutation::WrongType(_, _, v) => {
            map.insert(key, v.clone());
        }
        Mutation::Huge(..) => {
            map.insert(key, json!(HUGE));
        }
        Mutation::Deep(_, _, depth) => {
            let mut v = json!([]);
            for _ in 1..*depth {
                v = json!([v]);
            }
            map.insert(key, v);
        }
        Mutation::Long(_, _, n) => {
            map.insert(key, json!("x".repeat(*n)));
        }
        Mutation::Nul(..) => {
            map.insert(key, json!("a\u{0}b"));
        }
        Mutation::None | Mutation::Raw(_) | Mutation::Extra(..) => {}
    }
    let text = body.to_string();
    text.replace(&serde_json::to_string(HUGE).unwrap(), "1e400")
}
