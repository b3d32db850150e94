//! Signing keys: generated with `ring`, stored so that other tools read them. The private key
//! is PKCS#8 (PEM `PRIVATE KEY`, mode 0600; v1 for Ed25519, so openssl reads it too) in `<home>/keys/NAME.key`; the public key is a
//! SubjectPublicKeyInfo (PEM `PUBLIC KEY`) in `<home>/keys/NAME.pub`, the form
//! `cosign verify --key` and `openssl pkey -pubin` read. A key is named by its fingerprint:
//! sha256 over the SubjectPublicKeyInfo DER.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use base64::Engine as _;
use ring::signature::{self, KeyPair as _};
use serde::{Deserialize, Serialize};

/// The algorithms a key can use (cosign's default is ECDSA P-256 with SHA-256).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyAlgorithm {
    EcdsaP256,
    Ed25519,
}

impl std::fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyAlgorithm::EcdsaP256 => "ecdsa-p256",
            KeyAlgorithm::Ed25519 => "ed25519",
        })
    }
}

// The fixed DER head of a SubjectPublicKeyInfo: SEQUENCE { AlgorithmIdentifier, BIT STRING }.
// P-256: id-ecPublicKey + prime256v1, then the 65-byte uncompressed point.
const P256_SPKI_HEAD: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
// Ed25519: id-Ed25519, then the 32-byte key.
const ED25519_SPKI_HEAD: &[u8] = &[0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

/// A public key that verifies signatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub algorithm: KeyAlgorithm,
    /// The raw key (the uncompressed P-256 point, or the 32 Ed25519 bytes).
    raw: Vec<u8>,
}

impl PublicKey {
    /// From SubjectPublicKeyInfo DER.
    pub fn from_spki(der: &[u8]) -> Result<PublicKey> {
        if let Some(raw) = der.strip_prefix(P256_SPKI_HEAD).filter(|r| r.len() == 65 && r[0] == 4) {
            return Ok(PublicKey { algorithm: KeyAlgorithm::EcdsaP256, raw: raw.to_vec() });
        }
        if let Some(raw) = der.strip_prefix(ED25519_SPKI_HEAD).filter(|r| r.len() == 32) {
            return Ok(PublicKey { algorithm: KeyAlgorithm::Ed25519, raw: raw.to_vec() });
        }
        bail!(
            "not an ECDSA P-256 (uncompressed point) or Ed25519 public key; skillhost verifies those two (write one with `skillhost key generate` or `openssl pkey -pubout`)"
        )
    }

    /// From a PEM `PUBLIC KEY` block.
    pub fn from_pem(text: &str) -> Result<PublicKey> {
        PublicKey::from_spki(&pem_decode(text, "PUBLIC KEY")?)
    }

    pub fn spki(&self) -> Vec<u8> {
        let head = match self.algorithm {
            KeyAlgorithm::EcdsaP256 => P256_SPKI_HEAD,
            KeyAlgorithm::Ed25519 => ED25519_SPKI_HEAD,
        };
        [head, &self.raw].concat()
    }

    pub fn to_pem(&self) -> String {
        pem_encode(&self.spki(), "PUBLIC KEY")
    }

    /// `sha256:<hex>` over the SubjectPublicKeyInfo DER.
    pub fn fingerprint(&self) -> String {
        format!("sha256:{}", crate::text::sha256_hex(self.spki()))
    }

    /// Does `signature` (DER ECDSA for P-256, 64 raw bytes for Ed25519) sign `message`?
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let alg: &dyn signature::VerificationAlgorithm = match self.algorithm {
            KeyAlgorithm::EcdsaP256 => &signature::ECDSA_P256_SHA256_ASN1,
            KeyAlgorithm::Ed25519 => &signature::ED25519,
        };
        signature::UnparsedPublicKey::new(alg, &self.raw).verify(message, signature).is_ok()
    }
}

/// A private key that signs.
pub struct SigningKey {
    pair: Pair,
    pub public: PublicKey,
}

enum Pair {
    Ecdsa(signature::EcdsaKeyPair),
    Ed25519(signature::Ed25519KeyPair),
}

impl SigningKey {
    /// From PKCS#8 DER (as `ring` and `openssl genpkey` write it).
    pub fn from_pkcs8(der: &[u8]) -> Result<SigningKey> {
        let rng = ring::rand::SystemRandom::new();
        if let Ok(p) = signature::EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, der, &rng) {
            let public = PublicKey { algorithm: KeyAlgorithm::EcdsaP256, raw: p.public_key().as_ref().to_vec() };
            return Ok(SigningKey { pair: Pair::Ecdsa(p), public });
        }
        let p = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map_err(|_| anyhow!("not a PKCS#8 ECDSA P-256 or Ed25519 private key"))?;
        let public = PublicKey { algorithm: KeyAlgorithm::Ed25519, raw: p.public_key().as_ref().to_vec() };
        Ok(SigningKey { pair: Pair::Ed25519(p), public })
    }

    /// The signature over `message`: DER ECDSA (what cosign writes) or raw Ed25519.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        match &self.pair {
            Pair::Ecdsa(p) => Ok(p
                .sign(&ring::rand::SystemRandom::new(), message)
                .map_err(|_| anyhow!("ECDSA signing failed"))?
                .as_ref()
                .to_vec()),
            Pair::Ed25519(p) => Ok(p.sign(message).as_ref().to_vec()),
        }
    }
}

/// `<home>/keys`.
pub fn keys_dir(home: &Path) -> PathBuf {
    home.join("keys")
}

/// Key names are file names: lowercase letters, digits, `-`, `_`, `.` (not first).
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        bail!("key name `{name}`: use letters, digits, `-`, `_` and `.` (not first), at most 64 characters");
    }
    Ok(())
}

/// The files a generated key was written to.
#[derive(Debug, Clone, Serialize)]
pub struct GeneratedKey {
    pub name: String,
    pub algorithm: KeyAlgorithm,
    pub private_key: PathBuf,
    pub public_key: PathBuf,
    pub fingerprint: String,
}

/// Generate a key pair `name` in `<home>/keys`; refuses to overwrite an existing key.
pub fn generate(home: &Path, name: &str, algorithm: KeyAlgorithm) -> Result<GeneratedKey> {
    check_name(name)?;
    let dir = keys_dir(home);
    crate::fsutil::create_private_dir(&dir)?;
    let private_key = dir.join(format!("{name}.key"));
    let public_key = dir.join(format!("{name}.pub"));
    if private_key.exists() || public_key.exists() {
        bail!("a key named `{name}` exists in {}; pick another name (keys are never overwritten)", dir.display());
    }
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = match algorithm {
        KeyAlgorithm::EcdsaP256 => {
            signature::EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        }
        KeyAlgorithm::Ed25519 => signature::Ed25519KeyPair::generate_pkcs8(&rng),
    }
    .map_err(|_| anyhow!("cannot generate a key: the system random source failed"))?;
    let key = SigningKey::from_pkcs8(pkcs8.as_ref())?;
    let der = match algorithm {
        KeyAlgorithm::EcdsaP256 => pkcs8.as_ref().to_vec(),
        KeyAlgorithm::Ed25519 => ed25519_pkcs8_v1(pkcs8.as_ref())?,
    };
    write_private(&private_key, pem_encode(&der, "PRIVATE KEY").as_bytes())?;
    crate::fsutil::write_atomic_shared(&public_key, key.public.to_pem().as_bytes())?;
    Ok(GeneratedKey { name: name.into(), algorithm, private_key, public_key, fingerprint: key.public.fingerprint() })
}

// ring writes Ed25519 keys as PKCS#8 v2 (seed and public key), which openssl 3.0 refuses;
// v1 (the seed alone, RFC 8410) is what openssl writes, and ring reads it too.
/// After the outer SEQUENCE header: version 1 (v2), the Ed25519 OID, and the seed's OCTET STRING.
const ED25519_V2_BODY: &[u8] = &[0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
/// The whole v1 document before the seed: SEQUENCE of 46 bytes, version 0, OID, seed header.
const ED25519_V1_HEAD: &[u8] =
    &[0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// The PKCS#8 v1 form of ring's v2 Ed25519 document.
fn ed25519_pkcs8_v1(v2: &[u8]) -> Result<Vec<u8>> {
    let seed = match v2 {
        [0x30, len, body @ ..] if usize::from(*len) == body.len() => {
            body.strip_prefix(ED25519_V2_BODY).and_then(|rest| rest.get(..32))
        }
        _ => None,
    }
    .ok_or_else(|| anyhow!("unexpected Ed25519 PKCS#8 layout from ring"))?;
    let v1 = [ED25519_V1_HEAD, seed].concat();
    // The same key either way.
    let a = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&v1).map_err(|_| anyhow!("bad Ed25519 v1 key"))?;
    let b = signature::Ed25519KeyPair::from_pkcs8(v2).map_err(|_| anyhow!("bad Ed25519 v2 key"))?;
    if a.public_key().as_ref() != b.public_key().as_ref() {
        bail!("the Ed25519 PKCS#8 v1 form differs from ring's key");
    }
    Ok(v1)
}

/// Write `bytes` to a new file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).with_context(|| format!("cannot write {}", path.display()))
}

/// The signing key `name` from `<home>/keys`.
pub fn load_signing(home: &Path, name: &str) -> Result<SigningKey> {
    check_name(name)?;
    let path = keys_dir(home).join(format!("{name}.key"));
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!("cannot read the key `{name}` ({}); create it with `skillhost key generate {name}`", path.display())
    })?;
    SigningKey::from_pkcs8(&pem_decode(&text, "PRIVATE KEY")?).with_context(|| format!("{}", path.display()))
}

/// Generated keys in `<home>/keys`, as (name, public key).
pub fn list(home: &Path) -> Result<Vec<(String, PublicKey)>> {
    let Ok(rd) = std::fs::read_dir(keys_dir(home)) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".pub")
            && let Ok(text) = std::fs::read_to_string(e.path())
            && let Ok(key) = PublicKey::from_pem(&text)
        {
            out.push((stem.to_string(), key));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

pub fn pem_encode(der: &[u8], label: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The DER inside the first `label` PEM block of `text`.
pub fn pem_decode(text: &str, label: &str) -> Result<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin).ok_or_else(|| anyhow!("no `{begin}` block (expected a PEM {label})"))?;
    let rest = &text[start + begin.len()..];
    let stop = rest.find(&end).ok_or_else(|| anyhow!("the PEM {label} block has no `{end}` line"))?;
    let b64: String = rest[..stop].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| anyhow!("the PEM {label} block is not base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_sign_verify_and_round_trip_through_pem() {
        let home = tempfile::tempdir().unwrap();
        for (name, alg) in [("p", KeyAlgorithm::EcdsaP256), ("e", KeyAlgorithm::Ed25519)] {
            let g = generate(home.path(), name, alg).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&g.private_key).unwrap().permissions().mode() & 0o777, 0o600);
            let key = load_signing(home.path(), name).unwrap();
            let public = PublicKey::from_pem(&std::fs::read_to_string(&g.public_key).unwrap()).unwrap();
            assert_eq!(public, key.public);
            assert_eq!(public.algorithm, alg);
            let sig = key.sign(b"payload").unwrap();
            assert!(public.verify(b"payload", &sig));
            assert!(!public.verify(b"payloaD", &sig));
            assert!(generate(home.path(), name, alg).unwrap_err().to_string().contains("never overwritten"));
        }
        assert!(check_name("../x").is_err());
    }
}
