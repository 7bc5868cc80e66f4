use super::*;

fn owned(params: &[(&str, &str)]) -> Vec<(String, String)> {
    params
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

// CloudStack's published example ("How to sign an API call with Python", CloudStack developer
// guide): listUsers with these keys signs to TTpdDq/7j/J58XCRHomKoQXEQds=.
const DOC_API_KEY: &str =
    "plgWJfZK4gyS3mOMTVmjUVg-X-jlWlnfaUJ9GAbBbf9EdM-kAYMmAiLqzzq1ElZLYq_u38zCm0bewzGUdP66mg";
const DOC_SECRET: &str =
    "VDaACYb0LV9eNjTetIOElcVQkvJck_J_QljX_FcHRj87ZKiy0z0ty0ZsYBkoXkY9b7eq1EhwJaw7FF3akA3KBQ";
const DOC_SIGNATURE: &str = "TTpdDq/7j/J58XCRHomKoQXEQds=";

#[test]
fn the_published_example_signs_to_the_published_signature() {
    let params = owned(&[
        ("command", "listUsers"),
        ("response", "json"),
        ("apikey", DOC_API_KEY),
    ]);
    assert_eq!(
        string_to_sign(&params),
        "apikey=plgwjfzk4gys3momtvmjuvg-x-jlwlnfauj9gabbbf9edm-kaymmailqzzq1elzlyq_u38zcm0bewzgudp66mg&command=listusers&response=json"
    );
    assert_eq!(compute_signature(DOC_SECRET, &params), DOC_SIGNATURE);

    // And the server side accepts it, sent URL-encoded as the guide's final URL does.
    let query = format!(
        "apikey={DOC_API_KEY}&command=listUsers&response=json&signature={}",
        java_url_encode(DOC_SIGNATURE)
    );
    let verified = verify_query(&query, 0, |key| {
        (key == DOC_API_KEY).then(|| DOC_SECRET.to_string())
    })
    .unwrap();
    assert_eq!(verified.api_key, DOC_API_KEY);
    assert_eq!(verified.signature_version, None);
}

#[test]
fn names_sort_as_java_strings_and_values_encode_as_java_does() {
    let params = owned(&[
        ("zoneid", "z 1"),
        ("command", "deployVirtualMachine"),
        ("Name", "a~b"),
        ("tags[0].key", "k"),
        ("signature", "ignored"),
    ]);
    // `N` (0x4E) sorts before lower-case letters; the name is not encoded, the value is.
    assert_eq!(
        string_to_sign(&params),
        "name=a%7eb&command=deployvirtualmachine&tags[0].key=k&zoneid=z%201"
    );
}

#[test]
fn the_first_value_of_a_repeated_name_is_signed() {
    let params = owned(&[("command", "listZones"), ("id", "a"), ("id", "b")]);
    assert_eq!(string_to_sign(&params), "command=listzones&id=a");
}

#[test]
fn sign_adds_version_3_and_expires_and_verifies() {
    let creds = Credentials::new("key", "secret");
    let params = sign_params(
        &[("command", "listZones"), ("response", "json")],
        &creds,
        1_767_323_045,
    );
    let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "command",
            "response",
            "apiKey",
            "signatureVersion",
            "expires",
            "signature"
        ]
    );
    assert_eq!(params[4].1, "2026-01-02T03:04:05+0000");
    let query = sign(
        &[("command", "listZones"), ("response", "json")],
        &creds,
        1_767_323_045,
    );
    let now = 1_767_323_000_000;
    let secret = |k: &str| (k == "key").then(|| "secret".to_string());
    let verified = verify(&parse_query(&query), now, secret).unwrap();
    assert_eq!(verified.signature_version.as_deref(), Some("3"));
    assert_eq!(verified.expires_millis, Some(1_767_323_045_000));
}

#[test]
fn verification_fails_as_the_server_does() {
    let creds = Credentials::new("key", "secret");
    let secret = |k: &str| (k == "key").then(|| "secret".to_string());
    let signed = |expires| parse_query(&sign(&[("command", "listZones")], &creds, expires));
    let now = 1_000_000_000_000;

    assert_eq!(
        verify(&signed(999_999_999), now, secret),
        Err(Error::Expired {
            expires: format_expires(999_999_999)
        })
    );
    assert!(verify(&signed(1_000_000_000), now, secret).is_ok());
    assert_eq!(
        verify(&signed(1_000_000_100), now, |_| Some("other".into())),
        Err(Error::SignatureMismatch)
    );
    assert_eq!(
        verify(&signed(1_000_000_100), now, |_| None),
        Err(Error::UnknownApiKey)
    );

    let without = |name: &str| {
        signed(1_000_000_100)
            .into_iter()
            .filter(|(n, _)| n != name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        verify(&without("signature"), now, secret),
        Err(Error::MissingSignature)
    );
    assert_eq!(
        verify(&without("apiKey"), now, secret),
        Err(Error::MissingApiKey)
    );
    assert_eq!(
        verify(&without("expires"), now, secret),
        Err(Error::MissingExpires)
    );
    let mut bad_date = signed(1_000_000_100);
    for (n, v) in &mut bad_date {
        if n == "expires" {
            *v = "soon".into();
        }
    }
    assert_eq!(
        verify(&bad_date, now, secret),
        Err(Error::BadExpires("soon".into()))
    );
}

#[test]
fn credentials_debug_hides_the_secret() {
    let debug = format!("{:?}", Credentials::new("key", "hunter2"));
    assert!(
        debug.contains("key") && !debug.contains("hunter2"),
        "{debug}"
    );
}

#[cfg(not(target_arch = "wasm32"))]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_700_000_000_000;
    const EXPIRY: i64 = 1_700_000_600;

    fn secret(key: &str) -> Option<String> {
        (key == "key").then(|| "s3cr3t/+=".to_string())
    }

    fn creds() -> Credentials {
        Credentials::new("key", "s3cr3t/+=")
    }

    /// Unique parameter names (not the ones signing adds) with arbitrary values.
    fn params() -> impl Strategy<Value = Vec<(String, String)>> {
        proptest::collection::btree_map("[a-z][a-zA-Z0-9\\[\\]\\.]{0,12}", any::<String>(), 0..8)
            .prop_map(|m| {
                m.into_iter()
                    .filter(|(n, _)| {
                        ![SIGNATURE, API_KEY, SIGNATURE_VERSION, EXPIRES]
                            .iter()
                            .any(|r| n.eq_ignore_ascii_case(r))
                    })
                    .collect()
            })
    }

    fn borrowed(params: &[(String, String)]) -> Vec<(&str, &str)> {
        params
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect()
    }

    proptest! {
        #[test]
        fn sign_then_verify_holds(params in params()) {
            let query = sign(&borrowed(&params), &creds(), EXPIRY);
            let received = parse_query(&query);
            prop_assert!(verify(&received, NOW, secret).is_ok());
            // The server decodes exactly the values that were signed.
            for (name, value) in &params {
                prop_assert!(received.contains(&(name.clone(), value.clone())));
            }
        }

        #[test]
        fn parameter_order_does_not_matter(params in params(), seed in any::<u64>()) {
            let mut signed = parse_query(&sign(&borrowed(&params), &creds(), EXPIRY));
            // A deterministic shuffle.
            let len = signed.len();
            for i in (1..len).rev() {
                let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
                signed.swap(i, j);
            }
            prop_assert!(verify(&signed, NOW, secret).is_ok());
        }

        #[test]
        fn changing_a_value_breaks_verification(params in params(), pick in any::<usize>(), extra in "[a-z0-9 ~/]{1,3}") {
            prop_assume!(!params.is_empty());
            let mut received = parse_query(&sign(&borrowed(&params), &creds(), EXPIRY));
            let signed_len = params.len();
            let i = pick % signed_len;
            received[i].1.push_str(&extra);
            prop_assert_eq!(verify(&received, NOW, secret), Err(Error::SignatureMismatch));
        }

        #[test]
        fn changing_a_name_or_adding_a_parameter_breaks_verification(params in params(), pick in any::<usize>(), added in "[a-z]{1,8}") {
            let signed = parse_query(&sign(&borrowed(&params), &creds(), EXPIRY));
            if !params.is_empty() {
                let mut renamed = signed.clone();
                let i = pick % params.len();
                renamed[i].0.push('x');
                prop_assert_eq!(verify(&renamed, NOW, secret), Err(Error::SignatureMismatch));
            }
            prop_assume!(!params.iter().any(|(n, _)| n == &added));
            let mut extended = signed;
            extended.insert(0, (added, "v".to_string()));
            prop_assert_eq!(verify(&extended, NOW, secret), Err(Error::SignatureMismatch));
        }

        #[test]
        fn removing_a_parameter_breaks_verification(params in params(), pick in any::<usize>()) {
            prop_assume!(!params.is_empty());
            let mut received = parse_query(&sign(&borrowed(&params), &creds(), EXPIRY));
            received.remove(pick % params.len());
            prop_assert_eq!(verify(&received, NOW, secret), Err(Error::SignatureMismatch));
        }

        #[test]
        fn expires_round_trips(seconds in -62_000_000_000i64..250_000_000_000) {
            prop_assert_eq!(parse_expires(&format_expires(seconds)), Ok(seconds * 1000));
        }
    }
}
