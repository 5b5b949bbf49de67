//! [`PaymentHeader`]: a `PAYMENT-SIGNATURE` as a server reads it, against
//! the quote it answers: the echoes of that quote taken as its own values,
//! an exact-EVM payload typed where the parse meets it.

use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::evm::EvmDecoding;
use super::types::{ExactEvmPayloadRef, PaymentPayload, PaymentRequirements, ResourceInfo};

/// [`PaymentPayload`] as a server reads it from the header: the same fields
/// and checks, the scheme's `payload` kept as its raw JSON text. The
/// exact-EVM fields are read straight into typed values (by
/// [`read`](Self::read) as it meets them, else from that text); the
/// `Value` tree of a [`PaymentPayload`] is built only if something asks for
/// it (an HTTP facilitator's body, a refusal naming the payer as written).
///
/// `resource` and `accepted` are shared: a client echoes the quote's, and
/// [`read`](Self::read) takes an echo with the very bytes the server wrote
/// as that value, unparsed.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct PaymentHeader {
    #[serde(rename = "x402Version")]
    pub(crate) x402_version: u8,
    #[serde(default, deserialize_with = "shared_option")]
    pub(crate) resource: Option<Arc<ResourceInfo>>,
    #[serde(deserialize_with = "shared")]
    pub(crate) accepted: Arc<PaymentRequirements>,
    /// The payload's JSON text, as sent (one whole JSON value).
    #[serde(deserialize_with = "raw_text")]
    pub(crate) payload: Box<str>,
    #[serde(default)]
    pub(crate) extensions: Option<Map<String, Value>>,
    /// The exact-EVM payload, when [`read`](Self::read) typed it as it
    /// found it (else it is read from `payload` when asked).
    #[serde(skip)]
    pub(crate) exact_evm: Option<EvmDecoding>,
}

fn raw_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Box<str>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Into::into)
}

fn shared<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Arc<T>, D::Error> {
    T::deserialize(deserializer).map(Arc::new)
}

fn shared_option<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Arc<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(|value| value.map(Arc::new))
}

/// What a payment is expected to echo, each beside its JSON text as the
/// server wrote it (compact `serde_json`, as clients copy it back).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Echoes<'a> {
    pub(crate) offers: &'a [(Box<str>, Arc<PaymentRequirements>)],
    pub(crate) resource: &'a (Box<str>, Arc<ResourceInfo>),
}

/// A payment header as [`PaymentHeader::read`] parses it: the echoes and
/// the payload as their raw text.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "x402Version")]
    x402_version: u8,
    #[serde(default, borrow)]
    resource: Option<&'a RawValue>,
    #[serde(borrow)]
    accepted: &'a RawValue,
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(default)]
    extensions: Option<Map<String, Value>>,
}

/// A payment header's JSON with its top-level `accepted` and `resource`
/// values each cut to a `0` where they are byte for byte an echo, and its
/// `payload` where it parses as an exact-EVM one (typed by that parse, which
/// also finds where it ends): the header's parse then scans one byte for
/// each, not a few hundred, and the payload is parsed once, not scanned and
/// parsed again.
///
/// A cut is found by its key (`"accepted":` and the echo right after it),
/// not by a parse of the header, so the parse of the cut text checks it:
/// what was cut is one whole JSON value, and so is its stand-in. When that
/// parse puts the top-level `accepted` on the stand-in, where the echo
/// began, the bytes before it are the header's own: the header's parse
/// reached the echo in the same state, read one whole value, and went on
/// over the same bytes as the cut text's. It parses to the same fields,
/// with the echo there. Anywhere else (the key found inside another value,
/// an invalid header), the header is parsed as it came.
struct Elided<'a> {
    text: &'a [u8],
    /// Where the stand-in for `accepted` is, and which offer it echoed.
    accepted: Option<(usize, usize)>,
    /// Where the stand-in for `resource` is.
    resource: Option<usize>,
    /// Where the stand-in for `payload` is, the payload's text, and its
    /// fields typed.
    payload: Option<(usize, &'a str, EvmDecoding)>,
}

/// What a cut held.
#[derive(Clone, Copy)]
enum Echoed {
    Offer(usize),
    Resource,
    /// Not an echo: the exact-EVM payload, typed by its own parse (which
    /// found where it ends), so the header's parse need not scan it.
    Payload,
}

/// The longest header cut, on the stack (a payment's is about 1 KiB);
/// longer ones are parsed as they came.
const CUT_ON_STACK: usize = 2048;

impl<'a> Elided<'a> {
    const STAND_IN: &'static [u8] = b"0";

    /// `json` with the echoes (and an exact-EVM payload) found cut,
    /// written into `into` (at least as long), or `None` when none is.
    fn cut(json: &'a str, echoes: Echoes<'_>, into: &'a mut [u8]) -> Option<Self> {
        use memchr::memmem::Finder;
        static ACCEPTED: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new(b"\"accepted\":"));
        static RESOURCE: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new(b"\"resource\":"));
        static PAYLOAD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"payload\":"));
        let value_at =
            |key: &Finder<'_>| key.find(json.as_bytes()).map(|at| at + key.needle().len());
        let accepted = value_at(&ACCEPTED).and_then(|at| {
            let offer =
                (echoes.offers.iter()).position(|(text, _)| json[at..].starts_with(&**text))?;
            Some((at, echoes.offers[offer].0.len(), Echoed::Offer(offer)))
        });
        let resource = value_at(&RESOURCE)
            .filter(|&at| json[at..].starts_with(&*echoes.resource.0))
            .map(|at| (at, echoes.resource.0.len(), Echoed::Resource));
        // One value parsed where the payload begins, and where it ends (an
        // object right after its key: the text kept is the value's alone).
        let mut typed = None;
        let payload = value_at(&PAYLOAD).and_then(|at| {
            if json.as_bytes().get(at) != Some(&b'{') {
                return None;
            }
            let mut values = serde_json::Deserializer::from_str(&json[at..])
                .into_iter::<ExactEvmPayloadRef<'_>>();
            let evm = values.next()?.ok()?;
            let len = values.byte_offset();
            typed = Some((&json[at..at + len], EvmDecoding::of_ref(&evm)));
            Some((at, len, Echoed::Payload))
        });
        let mut cuts = [accepted, resource, payload];
        cuts.sort_by_key(|cut| cut.map(|(at, ..)| at));
        let (mut accepted, mut resource, mut payload) = (None, None, None);
        let (mut kept_from, mut written) = (0, 0);
        let mut write = |bytes: &[u8]| {
            into[written..written + bytes.len()].copy_from_slice(bytes);
            written += bytes.len();
            written
        };
        for (at, len, echoed) in cuts.into_iter().flatten() {
            if at < kept_from {
                return None; // one inside the other: no parse puts both at the top
            }
            let place = write(&json.as_bytes()[kept_from..at]);
            write(Self::STAND_IN);
            kept_from = at + len;
            match echoed {
                Echoed::Offer(offer) => accepted = Some((place, offer)),
                Echoed::Resource => resource = Some(place),
                Echoed::Payload => {
                    payload = (typed.take()).map(|(text, decoding)| (place, text, decoding));
                }
            }
        }
        if kept_from == 0 {
            return None;
        }
        let end = write(&json.as_bytes()[kept_from..]);
        Some(Elided {
            text: &into[..end],
            accepted,
            resource,
            payload,
        })
    }
}

impl PaymentHeader {
    /// A payment header's JSON, its `accepted` and `resource` taken from
    /// `echoes` when their text is byte for byte what the server wrote
    /// (then they equal it, and are cut before the parse: see [`Elided`]),
    /// else parsed as the derived reader would; an exact-EVM `payload`
    /// typed as it is met (also cut), else kept as text.
    pub(crate) fn read(json: &[u8], echoes: Echoes<'_>) -> serde_json::Result<Self> {
        // One UTF-8 check of the whole text, not one per string and raw value.
        let Ok(text) = std::str::from_utf8(json) else {
            let wire: Wire<'_> = serde_json::from_slice(json)?;
            return Self::of_wire(wire, echoes, None, None, None);
        };
        let mut stack = [0_u8; CUT_ON_STACK];
        if let Some(into) = stack.get_mut(..json.len())
            && let Some(elided) = Elided::cut(text, echoes, into)
            && let Some(header) = Self::read_elided(elided, echoes)
        {
            return Ok(header);
        }
        let wire: Wire<'_> = serde_json::from_str(text)?;
        Self::of_wire(wire, echoes, None, None, None)
    }

    /// [`read`](Self::read) of `elided`'s text: `None` unless the parse
    /// puts the top-level `accepted`, `resource` and `payload` on the
    /// stand-ins of the values cut (then the header parses to the same, as
    /// [`Elided`] says).
    fn read_elided(elided: Elided<'_>, echoes: Echoes<'_>) -> Option<Self> {
        // The cut text is the UTF-8 header's, whole values replaced by ASCII.
        let wire: Wire<'_> = serde_json::from_str(std::str::from_utf8(elided.text).ok()?).ok()?;
        let stands_in = |raw: &RawValue, place: usize| {
            raw.get().as_bytes() == Elided::STAND_IN
                && raw.get().as_ptr() as usize - elided.text.as_ptr() as usize == place
        };
        let accepted = match elided.accepted {
            Some((place, offer)) if stands_in(wire.accepted, place) => {
                Some(echoes.offers[offer].1.clone())
            }
            Some(_) => return None,
            None => None,
        };
        let resource = match elided.resource {
            Some(place) if wire.resource.is_some_and(|raw| stands_in(raw, place)) => {
                Some(echoes.resource.1.clone())
            }
            Some(_) => return None,
            None => None,
        };
        let payload = match elided.payload {
            Some((place, text, decoding)) if stands_in(wire.payload, place) => {
                Some((text, decoding))
            }
            Some(_) => return None,
            None => None,
        };
        Self::of_wire(wire, echoes, accepted, resource, payload).ok()
    }

    /// The header of a parse: `accepted` and `resource` as given, else
    /// matched with an echo by their text, else parsed; the payload as
    /// given (its text and typed fields), else its text in the parse.
    fn of_wire(
        wire: Wire<'_>,
        echoes: Echoes<'_>,
        accepted: Option<Arc<PaymentRequirements>>,
        resource: Option<Arc<ResourceInfo>>,
        payload: Option<(&str, EvmDecoding)>,
    ) -> serde_json::Result<Self> {
        let accepted = match accepted {
            Some(offer) => offer,
            None => match echoes
                .offers
                .iter()
                .find(|(text, _)| **text == *wire.accepted.get())
            {
                Some((_, offer)) => offer.clone(),
                None => Arc::new(serde_json::from_str(wire.accepted.get())?),
            },
        };
        let (resource_text, quoted_resource) = echoes.resource;
        let resource = match (resource, wire.resource) {
            (Some(resource), _) => Some(resource),
            (None, None) => None,
            (None, Some(raw)) if **resource_text == *raw.get() => Some(quoted_resource.clone()),
            (None, Some(raw)) => {
                serde_json::from_str::<Option<ResourceInfo>>(raw.get())?.map(Arc::new)
            }
        };
        let (payload, exact_evm) = match payload {
            Some((text, decoding)) => (text, Some(decoding)),
            None => (wire.payload.get(), None),
        };
        Ok(Self {
            x402_version: wire.x402_version,
            resource,
            accepted,
            payload: payload.into(),
            extensions: wire.extensions,
            exact_evm,
        })
    }

    /// The exact-EVM payload typed ([`EvmDecoding::NotExactEvm`] if it is
    /// another scheme's), read from its text; through a `Value` when a
    /// field has escapes (rare: hex needs none), so both read the same.
    pub(crate) fn evm_decoding(&self) -> EvmDecoding {
        match self.exact_evm_ref() {
            Some(evm) => EvmDecoding::of_ref(&evm),
            None => EvmDecoding::of(&self.to_payload()),
        }
    }

    /// The payload as [`PaymentPayload`] holds it.
    pub(crate) fn to_payload(&self) -> PaymentPayload {
        PaymentPayload {
            x402_version: self.x402_version,
            resource: self.resource.as_deref().cloned(),
            accepted: (*self.accepted).clone(),
            // Raw text the parser accepted is one JSON value.
            payload: serde_json::from_str(&self.payload).unwrap_or(Value::Null),
            extensions: self.extensions.clone(),
        }
    }

    /// [`PaymentPayload::exact_evm_ref`] on the raw text; `None` also when a
    /// field has escapes (it cannot be borrowed: read it through a `Value`).
    pub(crate) fn exact_evm_ref(&self) -> Option<ExactEvmPayloadRef<'_>> {
        serde_json::from_str(&self.payload).ok()
    }

    /// `payload.authorization.from` as the client wrote it, whatever the
    /// other fields hold; `None` also when it has escapes (read it through
    /// a `Value`).
    pub(crate) fn claimed_payer(&self) -> Option<&str> {
        #[derive(Deserialize)]
        struct Payload<'a> {
            #[serde(borrow)]
            authorization: Authorization<'a>,
        }
        #[derive(Deserialize)]
        struct Authorization<'a> {
            from: &'a str,
        }
        let payload: Payload<'_> = serde_json::from_str(&self.payload).ok()?;
        Some(payload.authorization.from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_headers_payer_is_read_as_written_whatever_its_other_fields_hold() {
        let header = |authorization: &str| -> PaymentHeader {
            serde_json::from_str(&format!(
                r#"{{"x402Version":2,"accepted":{{"scheme":"exact","network":"eip155:84532","amount":"1","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60}},"payload":{{"signature":"0x00","authorization":{authorization}}}}}"#
            ))
            .unwrap()
        };
        // Not an exact-EVM payment (its value is no amount), but it names its payer.
        let odd = header(r#"{"from":"0xAbC","value":"ten"}"#);
        assert!(odd.exact_evm_ref().is_none());
        assert_eq!(odd.claimed_payer(), Some("0xAbC"));
        assert_eq!(odd.to_payload().payload["authorization"]["value"], "ten");
        assert_eq!(header(r#"{"to":"0xAbC"}"#).claimed_payer(), None);
    }

    /// A payment header echoing its quote's offer and resource, as clients send it.
    const ECHOING: &str = r#"{"x402Version":2,"resource":{"url":"https://api.example.com/premium-data","description":"","mimeType":"application/json"},"accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},"payload":{"signature":"0x2d6a","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}}}"#;

    type Quoted<T> = (Box<str>, Arc<T>);

    /// `json` as the derived reader reads it, and its offer and resource
    /// as a quote keeps them: each value's compact JSON beside it.
    fn quoted(
        json: &str,
    ) -> (
        PaymentHeader,
        [Quoted<PaymentRequirements>; 1],
        Quoted<ResourceInfo>,
    ) {
        let derived: PaymentHeader = serde_json::from_str(json).unwrap();
        let offer_text = serde_json::to_string(&*derived.accepted).unwrap();
        let offers = [(offer_text.into(), derived.accepted.clone())];
        let resource = derived.resource.clone().unwrap();
        let resource = (serde_json::to_string(&*resource).unwrap().into(), resource);
        (derived, offers, resource)
    }

    /// A full exact-EVM payload, and [`ECHOING`] carrying it.
    fn exact_evm_header() -> (String, String) {
        let payload = format!(
            r#"{{"signature":"0x{}1b","authorization":{{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"0","validBefore":"1750000300","nonce":"0x{}"}}}}"#,
            "ab".repeat(64),
            "01".repeat(32)
        );
        let json = ECHOING.replacen(
            r#"{"signature":"0x2d6a","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}}"#,
            &payload,
            1,
        );
        (payload, json)
    }

    /// The header's payload typed: as [`PaymentHeader::read`] typed it, else from its text.
    fn typed(header: &PaymentHeader) -> EvmDecoding {
        (header.exact_evm.clone()).unwrap_or_else(|| header.evm_decoding())
    }

    /// What the derived reader refuses, [`PaymentHeader::read`] refuses.
    fn refused_by_both(json: &str, echoes: Echoes<'_>) {
        assert!(
            serde_json::from_str::<PaymentHeader>(json).is_err(),
            "{json}"
        );
        assert!(
            PaymentHeader::read(json.as_bytes(), echoes).is_err(),
            "{json}"
        );
    }

    #[test]
    fn an_echo_with_the_servers_bytes_is_its_value_and_any_other_is_parsed_as_before() {
        let json = ECHOING;
        let (derived, offers, resource) = quoted(json);
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        let read = PaymentHeader::read(json.as_bytes(), echoes).unwrap();
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert!(Arc::ptr_eq(read.resource.as_ref().unwrap(), &resource.1));
        assert_eq!(read.payload, derived.payload);

        // Spelled otherwise (a space, a null resource): parsed, the same values.
        let spaced =
            json.replacen("\"amount\":", "\"amount\": ", 1)
                .replacen("\"url\":", "\"url\": ", 1);
        let read = PaymentHeader::read(spaced.as_bytes(), echoes).unwrap();
        assert!(!Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert_eq!(read.accepted, derived.accepted);
        assert_eq!(read.resource, derived.resource);
        let no_resource = json.replacen(&*resource.0, "null", 1);
        let read = PaymentHeader::read(no_resource.as_bytes(), echoes).unwrap();
        assert_eq!(read.resource, None);
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));

        // What the derived reader refuses, this one refuses.
        for bad in [
            json.replacen("\"10000\"", "10000", 1),
            json.replacen(&*resource.0, "5", 1),
            json.replacen("\"x402Version\":2,", "", 1),
        ] {
            refused_by_both(&bad, echoes);
        }
    }

    #[test]
    fn an_echo_is_cut_only_where_the_parse_puts_the_top_level_value() {
        let json = ECHOING;
        let (derived, offers, resource) = quoted(json);
        let (offer_text, resource_text) = (offers[0].0.to_string(), resource.0.to_string());
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        // Both echoes cut, the rest of the text kept byte for byte.
        let mut into = [0; CUT_ON_STACK];
        let elided = Elided::cut(json, echoes, &mut into).unwrap();
        assert_eq!(
            String::from_utf8(elided.text.to_vec()).unwrap(),
            json.replacen(&offer_text, "0", 1)
                .replacen(&resource_text, "0", 1)
        );
        let read = PaymentHeader::read_elided(elided, echoes).unwrap();
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert!(Arc::ptr_eq(read.resource.as_ref().unwrap(), &resource.1));
        assert_eq!(read.payload, derived.payload);

        // The first `"accepted":` with an echo after it is inside an
        // extension, the top-level one is spelled otherwise: the cut does
        // not stand where the parse puts `accepted`, and the header is read
        // as it came, its extension whole.
        let spaced = offer_text.replacen("\"amount\":", "\"amount\": ", 1);
        let decoy = json.replacen(&offer_text, &spaced, 1).replacen(
            "{\"x402Version\":2,",
            &format!(
                "{{\"x402Version\":2,\"extensions\":{{\"note\":{{\"accepted\":{offer_text}}}}},"
            ),
            1,
        );
        let cut = Elided::cut(&decoy, echoes, &mut into);
        assert!(cut.unwrap().accepted.is_some());
        let read = PaymentHeader::read(decoy.as_bytes(), echoes).unwrap();
        let expected: PaymentHeader = serde_json::from_str(&decoy).unwrap();
        assert!(!Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert_eq!(read.accepted, expected.accepted);
        assert_eq!(read.extensions, expected.extensions);
        assert_eq!(
            read.extensions.unwrap()["note"]["accepted"],
            serde_json::to_value(&*derived.accepted).unwrap()
        );

        // `accepted` twice, the first an echo: refused as a duplicate, as
        // the derived reader does.
        let twice = json.replacen(
            "\"accepted\":",
            &format!("\"accepted\":{offer_text},\"accepted\":"),
            1,
        );
        refused_by_both(&twice, echoes);

        // An echo followed by what would continue its stand-in as a number
        // (`0.5`, `0e5`): invalid as sent, refused as the derived reader does.
        for tail in [".5", "e5", "5"] {
            let bad = json.replacen(&offer_text, &format!("{offer_text}{tail}"), 1);
            refused_by_both(&bad, echoes);
        }
        // A resource echo inside the accepted one: one cut inside the
        // other, nothing cut.
        let nested = offer_text.replacen(
            "\"extra\":{",
            &format!("\"extra\":{{\"resource\":{resource_text},"),
            1,
        );
        let nested_offer: PaymentRequirements = serde_json::from_str(&nested).unwrap();
        let offers = [(nested.clone().into_boxed_str(), Arc::new(nested_offer))];
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        let inside = format!(r#"{{"x402Version":2,"accepted":{nested},"payload":{{}}}}"#);
        assert!(Elided::cut(&inside, echoes, &mut into).is_none());
        let read = PaymentHeader::read(inside.as_bytes(), echoes).unwrap();
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert_eq!(read.resource, None);
    }

    #[test]
    fn an_exact_evm_payload_is_typed_where_it_stands_and_read_as_before_elsewhere() {
        let (payload, json) = exact_evm_header();
        let (derived, offers, resource) = quoted(&json);
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        let as_derived = |json: &str| {
            let derived: PaymentHeader = serde_json::from_str(json).unwrap();
            (typed(&derived), derived.payload)
        };
        assert!(matches!(typed(&derived), EvmDecoding::Decoded(..)));

        // Typed by its own parse, its text kept as sent.
        let mut into = [0; CUT_ON_STACK];
        let cut = Elided::cut(&json, echoes, &mut into).unwrap();
        assert_eq!(cut.payload.as_ref().unwrap().1, payload);
        let read = PaymentHeader::read(json.as_bytes(), echoes).unwrap();
        assert!(read.exact_evm.is_some());
        assert_eq!((typed(&read), read.payload.clone()), as_derived(&json));
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));

        // A field with an escape (not borrowed), a payload of another shape,
        // one under a decoy key inside an extension before the real one:
        // read as before, to the same.
        let escaped = json.replacen("\"0x857b", "\"\\u0030x857b", 1);
        let permit2 = json.replacen("\"authorization\":", "\"permit2Authorization\":", 1);
        let decoy = json.replacen(
            "\"accepted\":",
            &format!("\"extensions\":{{\"note\":{{\"payload\":{payload}}}}},\"accepted\":"),
            1,
        );
        let (escaped_typed, _) = as_derived(&escaped);
        assert_eq!(escaped_typed, typed(&derived));
        let spaced = json.replacen("\"payload\":", "\"payload\": ", 1);
        for other in [&escaped, &permit2, &decoy, &spaced] {
            let read = PaymentHeader::read(other.as_bytes(), echoes).unwrap();
            assert!(read.exact_evm.is_none(), "{other}");
            assert_eq!(
                (typed(&read), read.payload.clone()),
                as_derived(other),
                "{other}"
            );
        }
        assert!(
            Elided::cut(&decoy, echoes, &mut into)
                .unwrap()
                .payload
                .is_some()
        );

        // The payload glued to more, or twice: refused as the derived reader does.
        refused_by_both(&json.replacen(&payload, &format!("{payload}0"), 1), echoes);
        refused_by_both(
            &json.replacen(
                "\"payload\":",
                &format!("\"payload\":{payload},\"payload\":"),
                1,
            ),
            echoes,
        );
    }

    /// `read` and the derived reader on one text: both refuse it, or both
    /// read the same header (the payload typed the same).
    fn read_as_derived(json: &[u8], echoes: Echoes<'_>) {
        let derived = serde_json::from_slice::<PaymentHeader>(json);
        let read = PaymentHeader::read(json, echoes);
        let text = String::from_utf8_lossy(json);
        let (derived, read) = match (derived, read) {
            (Err(_), Err(_)) => return,
            (Ok(derived), Ok(read)) => (derived, read),
            (derived, read) => panic!("{text}: derived {derived:?}, read {read:?}"),
        };
        assert_eq!(read.x402_version, derived.x402_version, "{text}");
        assert_eq!(read.resource, derived.resource, "{text}");
        assert_eq!(read.accepted, derived.accepted, "{text}");
        assert_eq!(read.payload, derived.payload, "{text}");
        assert_eq!(read.extensions, derived.extensions, "{text}");
        assert_eq!(typed(&read), derived.evm_decoding(), "{text}");
    }

    #[test]
    fn every_one_byte_change_is_read_as_the_derived_reader_reads_it() {
        let (_, json) = exact_evm_header();
        let (_, offers, resource) = quoted(&json);
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        let json = json.as_bytes();
        read_as_derived(json, echoes);
        // At every place: the byte dropped, another put before it, or it
        // replaced (JSON's delimiters and a digit, a letter, non-ASCII).
        for at in 0..=json.len() {
            let mut edits: Vec<Vec<u8>> = Vec::new();
            if at < json.len() {
                edits.push([&json[..at], &json[at + 1..]].concat());
            }
            for byte in [
                b' ', b'"', b'{', b'}', b',', b':', b'0', b'.', b'x', b'\\', 0xc3,
            ] {
                edits.push([&json[..at], &[byte][..], &json[at..]].concat());
                if at < json.len() {
                    edits.push([&json[..at], &[byte][..], &json[at + 1..]].concat());
                }
            }
            for edited in edits {
                read_as_derived(&edited, echoes);
            }
        }
    }
}
