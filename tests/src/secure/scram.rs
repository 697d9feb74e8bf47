//! The server side of SASL/SCRAM (RFC 5802, RFC 7677) for one user: enough
//! to make a client prove it knows the password, and to prove back that
//! the server knows it too (librdkafka checks the server's signature).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256, Sha512};

const ITERATIONS: u32 = 4096;

#[derive(Debug, Clone, Copy)]
pub enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap_or_else(|e| panic!("hmac key: {e}"));
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            Hash::Sha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).unwrap_or_else(|e| panic!("hmac key: {e}"));
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(data).to_vec(),
            Hash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn salted_password(self, password: &str, salt: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password.as_bytes(), salt, ITERATIONS).to_vec(),
            Hash::Sha512 => pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password.as_bytes(), salt, ITERATIONS).to_vec(),
        }
    }
}

/// One authentication exchange.
#[derive(Debug)]
pub struct Exchange {
    hash: Hash,
    user: String,
    password: String,
    /// After the first message: what the last one is checked against.
    first: Option<First>,
}

#[derive(Debug)]
struct First {
    client_first_bare: String,
    server_first: String,
    nonce: String,
    salted_password: Vec<u8>,
}

impl Exchange {
    pub fn new(hash: Hash, user: &str, password: &str) -> Self {
        Self { hash, user: user.to_owned(), password: password.to_owned(), first: None }
    }

    /// `client-first-message` → `server-first-message`.
    pub fn first(&mut self, message: &str) -> Result<String, String> {
        // gs2 header: "n,," (no channel binding, no authzid) or "y,,".
        let mut parts = message.splitn(3, ',');
        let (Some(binding), Some(_authzid), Some(bare)) = (parts.next(), parts.next(), parts.next()) else {
            return Err("malformed client-first-message".into());
        };
        if binding != "n" && binding != "y" {
            return Err("channel binding is not supported".into());
        }
        let user = attribute(bare, 'n').ok_or("no user in client-first-message")?;
        let client_nonce = attribute(bare, 'r').ok_or("no nonce in client-first-message")?;
        if user != self.user {
            return Err("unknown user".into());
        }
        let salt = uuid::Uuid::now_v7().as_bytes().to_vec();
        let nonce = format!("{client_nonce}{}", uuid::Uuid::now_v7().simple());
        let server_first = format!("r={nonce},s={},i={ITERATIONS}", B64.encode(&salt));
        self.first = Some(First {
            client_first_bare: bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
            salted_password: self.hash.salted_password(&self.password, &salt),
        });
        Ok(server_first)
    }

    /// `client-final-message` → `server-final-message`, or why the proof
    /// does not hold.
    pub fn last(&mut self, message: &str) -> Result<String, String> {
        let first = self.first.take().ok_or("client-final-message before client-first-message")?;
        let (without_proof, proof) = message.rsplit_once(",p=").ok_or("no proof in client-final-message")?;
        if attribute(without_proof, 'r') != Some(first.nonce.as_str()) {
            return Err("nonce mismatch".into());
        }
        let proof = B64.decode(proof).map_err(|_| "proof is not base64")?;
        let auth_message = format!("{},{},{without_proof}", first.client_first_bare, first.server_first);
        let client_key = self.hash.hmac(&first.salted_password, b"Client Key");
        let stored_key = self.hash.digest(&client_key);
        let client_signature = self.hash.hmac(&stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err("invalid proof".into());
        }
        let recovered: Vec<u8> = proof.iter().zip(&client_signature).map(|(p, s)| p ^ s).collect();
        if self.hash.digest(&recovered) != stored_key {
            return Err("invalid credentials".into());
        }
        let server_key = self.hash.hmac(&first.salted_password, b"Server Key");
        Ok(format!("v={}", B64.encode(self.hash.hmac(&server_key, auth_message.as_bytes()))))
    }
}

/// The value of `key=` in a comma-separated SCRAM message.
fn attribute(message: &str, key: char) -> Option<&str> {
    message.split(',').find_map(|part| part.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
}
