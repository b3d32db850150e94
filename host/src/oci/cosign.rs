//! cosign's key-based signature format, so `cosign verify --key` can check what skillhost
//! signs and skillhost can check what cosign signs with a key. The signed bytes are a
//! "simple signing" payload naming the repository (`docker-reference`) and the manifest
//! digest (`docker-manifest-digest`); both are checked, so a signature moved to another
//! repository or another manifest does not verify. The signature (base64) sits in the
//! annotation `dev.cosignproject.cosign/signature` of a layer of an image manifest stored
//! under the tag `sha256-<hex>.sig`.

use anyhow::{Result, anyhow, bail};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::keys::{PublicKey, SigningKey};
use super::trust::{TrustFile, TrustRule};

pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// The tag that holds the signatures of the manifest `digest` (`sha256:<hex>`).
pub fn signature_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1) + ".sig"
}

/// The simple-signing payload for `repository` (`HOST[:PORT]/PATH`) at `digest`.
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    let v = json!({
        "critical": {
            "identity": { "docker-reference": repository },
            "image": { "docker-manifest-digest": digest },
            "type": PAYLOAD_TYPE,
        },
        "optional": { "creator": crate::http::USER_AGENT },
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}
#[derive(Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}
#[derive(Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}
#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// Why one signature did not count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureRejected {
    #[error("its payload is not a cosign simple-signing payload ({0})")]
    BadPayload(String),
    #[error("it signs repository `{signed}`, not `{wanted}` (a signature copied from another repository)")]
    OtherRepository { signed: String, wanted: String },
    #[error("it signs manifest {signed}, not {wanted} (the tag was moved or the manifest swapped)")]
    OtherManifest { signed: String, wanted: String },
    #[error("no key trusted for `{repository}` made it{fingerprints}")]
    Untrusted { repository: String, fingerprints: String },
}

/// Check the payload's claims: the repository and the manifest digest it signs.
pub fn check_payload(bytes: &[u8], repository: &str, digest: &str) -> Result<(), SignatureRejected> {
    let p: Payload = serde_json::from_slice(bytes).map_err(|e| SignatureRejected::BadPayload(e.to_string()))?;
    if p.critical.kind != PAYLOAD_TYPE {
        return Err(SignatureRejected::BadPayload(format!("type `{}`", p.critical.kind)));
    }
    // cosign signs the reference without a tag or digest; accept `repo:tag` forms it wrote
    // in older versions only when the repository part matches.
    let signed = p.critical.identity.docker_reference;
    let signed_repo = signed.split('@').next().unwrap_or(&signed);
    let signed_repo = match signed_repo.rsplit_once(':') {
        // `bundle:NAME` (a signed bundle) has no tag.
        Some((r, tag)) if !tag.contains('/') && !signed_repo.starts_with("bundle:") => r,
        _ => signed_repo,
    };
    if signed_repo != repository {
        return Err(SignatureRejected::OtherRepository { signed, wanted: repository.into() });
    }
    if p.critical.image.docker_manifest_digest != digest {
        return Err(SignatureRejected::OtherManifest {
            signed: p.critical.image.docker_manifest_digest,
            wanted: digest.into(),
        });
    }
    Ok(())
}

/// Who signed what was verified: the key, and the trust rule that made it count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signer {
    pub fingerprint: String,
    pub algorithm: super::keys::KeyAlgorithm,
    /// The trust rule's prefix (`HOST[:PORT]/PATH`).
    pub rule: String,
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "key {} ({}), trusted for {}", short_fingerprint(&self.fingerprint), self.algorithm, self.rule)
    }
}

pub fn short_fingerprint(f: &str) -> &str {
    f.get(..("sha256:".len() + 16)).unwrap_or(f)
}

/// One signature as stored: the payload bytes and the signature bytes.
#[derive(Debug, Clone)]
pub struct StoredSignature {
    pub payload: Vec<u8>,
    pub signature: Vec<u8>,
}

/// Verify `signatures` of `repository`@`digest` against the keys `trust` holds for it; the
/// first that passes names the signer. The error says why each failed.
pub fn verify(
    signatures: &[StoredSignature],
    repository: &str,
    digest: &str,
    trust: &TrustFile,
) -> Result<Signer, Vec<SignatureRejected>> {
    let rules: Vec<(&TrustRule, PublicKey)> =
        trust.for_repository(repository).into_iter().filter_map(|r| Some((r, r.public_key().ok()?))).collect();
    let mut why = Vec::new();
    for s in signatures {
        if let Err(e) = check_payload(&s.payload, repository, digest) {
            why.push(e);
            continue;
        }
        match rules.iter().find(|(_, key)| key.verify(&s.payload, &s.signature)) {
            Some((rule, key)) => {
                return Ok(Signer {
                    fingerprint: key.fingerprint(),
                    algorithm: key.algorithm,
                    rule: rule.prefix.clone(),
                });
            }
            None => why.push(SignatureRejected::Untrusted {
                repository: repository.into(),
                fingerprints: if rules.is_empty() {
                    " (no key is trusted for it)".into()
                } else {
                    format!(
                        " (trusted: {})",
                        rules
                            .iter()
                            .map(|(_, k)| short_fingerprint(&k.fingerprint()).to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            }),
        }
    }
    Err(why)
}

/// The signature layer's annotation value for `payload` signed by `key`.
pub fn sign(key: &SigningKey, payload: &[u8]) -> Result<String> {
    Ok(base64::engine::general_purpose::STANDARD.encode(key.sign(payload)?))
}

/// The base64 signature of a layer's annotations.
pub fn signature_of(annotations: Option<&serde_json::Map<String, Value>>) -> Result<Vec<u8>> {
    let b64 = annotations
        .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("the signature layer has no `{SIGNATURE_ANNOTATION}` annotation"))?;
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| anyhow!("the signature is not base64: {e}"))
}

/// Refuse a `digest` that is not `sha256:` and 64 lowercase hex digits.
pub fn check_digest(digest: &str) -> Result<&str> {
    match digest.strip_prefix("sha256:") {
        Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => Ok(h),
        _ => bail!("`{digest}` is not a sha256 digest (sha256: and 64 lowercase hex digits)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::keys::{KeyAlgorithm, generate, load_signing};

    #[test]
    fn payload_claims_are_checked_and_only_trusted_keys_count() {
        let home = tempfile::tempdir().unwrap();
        generate(home.path(), "alice", KeyAlgorithm::EcdsaP256).unwrap();
        generate(home.path(), "mallory", KeyAlgorithm::Ed25519).unwrap();
        let alice = load_signing(home.path(), "alice").unwrap();
        let mallory = load_signing(home.path(), "mallory").unwrap();
        let digest = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        let mut trust = TrustFile::default();
        trust.add("oci://reg:5000/alice/", &alice.public).unwrap();
        let signed = |key: &SigningKey, repo: &str, d: &str| {
            let payload = payload(repo, d);
            let signature = key.sign(&payload).unwrap();
            StoredSignature { payload, signature }
        };
        let ok = verify(&[signed(&alice, "reg:5000/alice/tool", &digest)], "reg:5000/alice/tool", &digest, &trust);
        assert_eq!(ok.unwrap().rule, "reg:5000/alice");
        let e = verify(&[signed(&alice, "reg:5000/bob/tool", &digest)], "reg:5000/alice/tool", &digest, &trust);
        assert!(matches!(&e.unwrap_err()[0], SignatureRejected::OtherRepository { .. }));
        let e = verify(&[signed(&alice, "reg:5000/alice/tool", &other)], "reg:5000/alice/tool", &digest, &trust);
        assert!(matches!(&e.unwrap_err()[0], SignatureRejected::OtherManifest { .. }));
        let e = verify(&[signed(&mallory, "reg:5000/alice/tool", &digest)], "reg:5000/alice/tool", &digest, &trust);
        assert!(matches!(&e.unwrap_err()[0], SignatureRejected::Untrusted { .. }));
        // Alice's key is not trusted for Bob's repository even over a correct payload.
        let e = verify(&[signed(&alice, "reg:5000/bob/tool", &digest)], "reg:5000/bob/tool", &digest, &trust);
        assert!(matches!(&e.unwrap_err()[0], SignatureRejected::Untrusted { .. }));
        assert_eq!(signature_tag(&digest), format!("sha256-{}.sig", "a".repeat(64)));
    }
}
