//! Signed `.skill` bundles: the same cosign simple-signing payload and keys as OCI artifacts,
//! over the bundle's content digest, checked against the same trust file.
//!
//! A bundle has no registry, so what a signature names is `bundle:NAME` (the skill's name,
//! as SKILL.md declares it and as it installs): `skillhost trust add bundle:NAME KEY.pub`
//! trusts a key for that one skill, `bundle:*` for every bundle. The default follows OCI's
//! where the user asked for it: once a rule covers a bundle's name, the bundle must carry a
//! signature by a key of that rule (else refused without `--allow-unsigned`). Where no rule
//! covers the name the bundle is a local file as before and installs, reported as unsigned
//! (or as signed by a key nobody trusts); a signature that does not match the bundle's own
//! content is refused either way, since it means the bundle was altered after signing.

use anyhow::{Result, anyhow, bail};
use base64::Engine as _;

use super::cosign::{self, SignatureRejected, Signer, StoredSignature};
use super::keys::{PublicKey, SigningKey};
use super::trust::TrustFile;
use super::{Provenance, Unsigned};
use crate::bundle::BundleSignature;

/// What a bundle signature names: `bundle:NAME`.
pub fn identity(name: &str) -> String {
    format!("bundle:{name}")
}

/// Sign the bundle `name` whose content digest is `digest`.
pub fn sign(name: &str, digest: &str, key: &SigningKey) -> Result<BundleSignature> {
    let payload = cosign::payload(&identity(name), digest);
    let signature = cosign::sign(key, &payload)?;
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(BundleSignature { payload: b64.encode(&payload), signature, key: key.public.to_pem() })
}

/// How a bundle's signature stands against the trust file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundleTrust {
    /// Signed by a key a rule covering `bundle:NAME` trusts.
    Signed(Signer),
    /// No signature, and no rule asks for one.
    Unsigned,
    /// A signature that matches the content, by a key no rule covers (no rule asks for one).
    SignedByUnknownKey { fingerprint: String },
    /// A signature was required or broken, and `--allow-unsigned` installed it anyway.
    AllowedUnsigned,
}

/// The outcome of [`check`]: what to show, and what install.json and the audit log record.
#[derive(Debug, Clone)]
pub struct Checked {
    pub trust: BundleTrust,
    pub provenance: Provenance,
}

fn decode(s: &BundleSignature) -> Result<(StoredSignature, PublicKey), SignatureRejected> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64.decode(s.payload.trim()).map_err(|e| SignatureRejected::BadPayload(format!("base64: {e}")))?;
    let signature =
        b64.decode(s.signature.trim()).map_err(|e| SignatureRejected::BadPayload(format!("signature base64: {e}")))?;
    let key = PublicKey::from_pem(&s.key).map_err(|e| SignatureRejected::BadPayload(format!("signer key: {e}")))?;
    Ok((StoredSignature { payload, signature }, key))
}

/// Check the signature of the bundle `name` (as it installs) with content `digest` against
/// `trust`. `Err` when it must not install; the message says what to do.
pub fn check(
    trust: &TrustFile,
    name: &str,
    digest: &str,
    signature: Option<&BundleSignature>,
    unsigned: Unsigned,
) -> Result<Checked> {
    let identity = identity(name);
    let required = !trust.for_repository(&identity).is_empty();
    let decoded = signature.map(decode);
    let refusal = match &decoded {
        None if !required => None,
        None => {
            Some(format!("the bundle `{name}` is not signed, and your trust file asks for a signature on {identity}"))
        }
        Some(Err(why)) => Some(format!("the bundle's signature is unreadable: {why}")),
        Some(Ok((stored, key))) => match cosign::verify(std::slice::from_ref(stored), &identity, digest, trust) {
            Ok(signer) => return Ok(checked(&identity, digest, BundleTrust::Signed(signer))),
            Err(why) => {
                let matches_content = cosign::check_payload(&stored.payload, &identity, digest).is_ok()
                    && key.verify(&stored.payload, &stored.signature);
                if !matches_content {
                    let why = reasons(&why);
                    let why = if why.contains("no key trusted") {
                        "the signature does not verify with the key it names".into()
                    } else {
                        why
                    };
                    Some(format!(
                        "the bundle's signature does not match its content ({why}): it was altered after signing"
                    ))
                } else if required {
                    let why = reasons(&why);
                    Some(format!(
                        "the bundle is signed by key {}, but {why}",
                        cosign::short_fingerprint(&key.fingerprint())
                    ))
                } else {
                    return Ok(checked(
                        &identity,
                        digest,
                        BundleTrust::SignedByUnknownKey { fingerprint: key.fingerprint() },
                    ));
                }
            }
        },
    };
    match refusal {
        None => Ok(checked(&identity, digest, BundleTrust::Unsigned)),
        Some(why) if unsigned == Unsigned::Allow => {
            tracing::warn!("installing the bundle `{name}` without a verified signature: {why}");
            Ok(checked(&identity, digest, BundleTrust::AllowedUnsigned))
        }
        Some(why) => bail!(
            "{why}. Refusing to install it. If you trust its publisher, get their public key and run `skillhost trust add {identity} KEY.pub`; to install it anyway, pass --allow-unsigned (recorded in the audit log)."
        ),
    }
}

/// Why signatures failed, in a bundle's words (a bundle has content, not a manifest or tag).
fn reasons(why: &[SignatureRejected]) -> String {
    let one = |r: &SignatureRejected| match r {
        SignatureRejected::OtherManifest { signed, wanted } => format!("it signs content {signed}, not {wanted}"),
        other => other.to_string(),
    };
    why.iter().map(one).collect::<Vec<_>>().join("; ")
}

fn checked(identity: &str, digest: &str, trust: BundleTrust) -> Checked {
    let signer = match &trust {
        BundleTrust::Signed(s) => Some(s.clone()),
        _ => None,
    };
    let provenance = Provenance {
        repository: identity.to_string(),
        tag: None,
        digest: digest.to_string(),
        signer,
        unsigned_allowed: trust == BundleTrust::AllowedUnsigned,
    };
    Checked { trust, provenance }
}

impl std::fmt::Display for BundleTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BundleTrust::Signed(s) => write!(f, "signed: {s}"),
            BundleTrust::Unsigned => f.write_str("unsigned bundle (no trust rule asks for a signature on its name)"),
            BundleTrust::SignedByUnknownKey { fingerprint } => write!(
                f,
                "signed by key {}, which no trust rule covers: nobody you trust vouches for it (trust it with `skillhost trust add bundle:NAME KEY.pub`)",
                cosign::short_fingerprint(fingerprint)
            ),
            BundleTrust::AllowedUnsigned => f.write_str(
                "! UNSIGNED OR UNTRUSTED: installing only because of --allow-unsigned (recorded in the audit log)",
            ),
        }
    }
}

/// Refuse a bundle whose MANIFEST.json names another skill than its SKILL.md: the signature
/// and the trust rule name the skill as it installs.
pub fn check_name(bundle_name: &str, skill_name: &str) -> Result<()> {
    if bundle_name != skill_name {
        return Err(anyhow!(
            "the bundle says it is `{bundle_name}` but its SKILL.md names `{skill_name}`; refusing it (repack it with `skillhost skill pack`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::keys::{KeyAlgorithm, generate, load_signing};

    #[test]
    fn bundle_signatures_follow_the_trust_file() {
        let home = tempfile::tempdir().unwrap();
        generate(home.path(), "alice", KeyAlgorithm::EcdsaP256).unwrap();
        generate(home.path(), "mallory", KeyAlgorithm::Ed25519).unwrap();
        let alice = load_signing(home.path(), "alice").unwrap();
        let mallory = load_signing(home.path(), "mallory").unwrap();
        let digest = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        let none = TrustFile::default();
        let by_alice = sign("tool", &digest, &alice).unwrap();
        let refuse = Unsigned::Refuse;
        // No rule: unsigned and unknown keys install; a signature over other content does not.
        assert_eq!(check(&none, "tool", &digest, None, refuse).unwrap().trust, BundleTrust::Unsigned);
        assert!(matches!(
            check(&none, "tool", &digest, Some(&by_alice), refuse).unwrap().trust,
            BundleTrust::SignedByUnknownKey { .. }
        ));
        let e = check(&none, "tool", &other, Some(&by_alice), refuse).unwrap_err().to_string();
        assert!(e.contains("altered after signing"), "{e}");
        // A rule for the name: only its key counts, and a signature is required.
        let mut trust = TrustFile::default();
        trust.add("bundle:tool", &alice.public).unwrap();
        let ok = check(&trust, "tool", &digest, Some(&by_alice), refuse).unwrap();
        assert_eq!(ok.provenance.signer.unwrap().rule, "bundle:tool");
        let e = check(&trust, "tool", &digest, None, refuse).unwrap_err().to_string();
        assert!(e.contains("not signed") && e.contains("--allow-unsigned"), "{e}");
        let by_mallory = sign("tool", &digest, &mallory).unwrap();
        let e = check(&trust, "tool", &digest, Some(&by_mallory), refuse).unwrap_err().to_string();
        assert!(e.contains("no key trusted for `bundle:tool`"), "{e}");
        let e = check(&trust, "tool", &digest, Some(&sign("other", &digest, &alice).unwrap()), refuse)
            .unwrap_err()
            .to_string();
        assert!(e.contains("signs repository `bundle:other`"), "{e}");
        let allowed = check(&trust, "tool", &digest, None, Unsigned::Allow).unwrap();
        assert!(allowed.provenance.unsigned_allowed);
        // `bundle:*` covers every name; an OCI rule covers no bundle.
        let mut star = TrustFile::default();
        star.add("bundle:*", &alice.public).unwrap();
        assert!(check(&star, "tool", &digest, Some(&by_alice), refuse).is_ok());
        let mut oci = TrustFile::default();
        oci.add("oci://bundle", &alice.public).unwrap();
        assert_eq!(check(&oci, "tool", &digest, None, refuse).unwrap().trust, BundleTrust::Unsigned);
    }
}
