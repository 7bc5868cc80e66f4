//! `capstan provider verify`: checks a component's signature with the host's own verification
//! (`capstan::provider::verify`), before it is shipped or to see why a host refuses it:
//!
//! - `capstan provider verify FILE --bundle FILE.sigstore.json --key cosign.pub`: a component and
//!   its Sigstore bundle (what a ConfigMap source carries in `bundleKey`);
//! - `capstan provider verify --oci REFERENCE --key cosign.pub`: an OCI artifact, its layer pulled
//!   and checked against its digest, and the cosign signatures stored beside it (the `.sig` tag
//!   and Sigstore bundle referrers).
//!
//! Keyless signatures (a bundle carrying a certificate) are checked with `--trust-root
//! trusted_root.json` (Sigstore's form: certificate authorities, timestamp authorities, logs) and
//! the identity (`--subject`/`--subject-prefix`, `--issuer`/`--issuer-prefix`), as the Provider's
//! `spec.verification.identities` and `trustRoot` are; the trust root also verifies the log
//! entries and timestamps of a bundle signed with a key.
//!
//! Exits 0 and names the key (or identity) that verified it, or 1 with the reason the host would give
//! (`SignatureMissing`, `SignatureInvalid`, ...).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;

use capstan::api::provider::KeylessIdentity;
use capstan::provider::oci;
use capstan::provider::source;
use capstan::provider::verify::keyless::{Identity, TrustRoot};
use capstan::provider::verify::{self, Keys};
use capstan::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE;

use crate::commands::provider::RegistryArgs;
use crate::commands::{block_on, read_component};

/// Arguments of `capstan provider verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The component (`.wasm`), or with `--oci` an OCI reference (`registry/repository:tag` or
    /// `@sha256:…`).
    target: String,
    /// The target is an OCI reference: verify the signatures stored in its registry.
    #[arg(long)]
    oci: bool,
    /// The component's Sigstore bundle (`cosign sign-blob --bundle`); for a file target.
    #[arg(long, conflicts_with = "oci")]
    bundle: Option<PathBuf>,
    /// A cosign public key (PEM, `cosign.pub`); repeatable: any one of them is enough.
    #[arg(long = "key", required_unless_present_any = ["subject", "subject_prefix"])]
    keys: Vec<PathBuf>,
    /// Sigstore's `trusted_root.json` (`cosign trusted-root create`): the certificate
    /// authorities keyless certificates chain to, and the timestamp authorities and logs that
    /// prove when a bundle was signed.
    #[arg(long)]
    trust_root: Option<PathBuf>,
    /// The keyless signer's certificate subject (email or URI), exactly.
    #[arg(
        long,
        group = "subject_match",
        requires = "trust_root",
        requires = "issuer_match"
    )]
    subject: Option<String>,
    /// The keyless signer's certificate subject, by prefix.
    #[arg(
        long,
        group = "subject_match",
        requires = "trust_root",
        requires = "issuer_match"
    )]
    subject_prefix: Option<String>,
    /// The keyless signer's OIDC issuer, exactly.
    #[arg(long, group = "issuer_match", requires = "subject_match")]
    issuer: Option<String>,
    /// The keyless signer's OIDC issuer, by prefix.
    #[arg(long, group = "issuer_match", requires = "subject_match")]
    issuer_prefix: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Verifies; prints what verified it, or the reason it does not.
pub fn run(args: &VerifyArgs) -> Result<ExitCode> {
    let mut named = Vec::with_capacity(args.keys.len());
    for path in &args.keys {
        let pem = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        named.push((path.display().to_string(), pem));
    }
    let mut keys = Keys::parse(named)?;
    if let Some(path) = &args.trust_root {
        let json = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        keys = keys.with_trust_root(TrustRoot::parse(path.display().to_string(), &json)?);
    }
    if args.subject.is_some() || args.subject_prefix.is_some() {
        let identity = Identity::from(&KeylessIdentity {
            issuer: args.issuer.clone(),
            issuer_prefix: args.issuer_prefix.clone(),
            subject: args.subject.clone(),
            subject_prefix: args.subject_prefix.clone(),
        });
        keys = keys.with_identities(vec![identity]);
    }
    let (what, verified) = if args.oci {
        let remote = args.registry.remote(&args.target)?;
        block_on(async {
            let pulled = oci::pull(&remote, None, DEFAULT_MAX_COMPONENT_SIZE).await?;
            let what = format!(
                "{}/{}@{}",
                remote.reference.registry(),
                remote.reference.repository(),
                pulled.manifest_digest
            );
            let (signatures, bundles) =
                oci::signature_evidence(&remote, &pulled.manifest_digest).await?;
            Ok((
                what,
                verify::verify_oci(
                    &signatures,
                    &bundles,
                    &pulled.manifest,
                    &pulled.manifest_digest,
                    &keys,
                ),
            ))
        })?
    } else {
        let Some(bundle) = &args.bundle else {
            bail!("a component file needs --bundle (or pass --oci for a registry reference)");
        };
        let path = PathBuf::from(&args.target);
        let bytes = read_component(&path, DEFAULT_MAX_COMPONENT_SIZE)?;
        let bundle = std::fs::read_to_string(bundle)
            .with_context(|| format!("cannot read {}", bundle.display()))?;
        (
            format!("{} (sha256:{})", path.display(), source::sha256_hex(&bytes)),
            verify::verify_bundle(&bytes, &bundle, &keys),
        )
    };
    match verified {
        Ok(key) => {
            println!("Verified {what}: signed by {key}");
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("{what}: {} ({err})", err.reason());
            Ok(ExitCode::FAILURE)
        }
    }
}
