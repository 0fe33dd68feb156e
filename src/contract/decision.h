// The decision annotation (docs/design/0002 §4): what the scheduler decided for a pod, written
// into the pod at bind and signed with Ed25519 so that only the scheduler can have written it.
// The node agent reads it back with ParseDecision + Verifier.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/model.h"
#include "tessera/status.h"

namespace tessera::contract {

inline constexpr std::string_view kDecisionApiVersion = "tessera.dev/decision/v1";

struct DecisionDevice {
  std::string uuid;
  std::uint64_t memory_bytes = 0;
  std::uint32_t cores_percent = 0;
  bool operator==(const DecisionDevice&) const = default;
};

struct DecisionContainer {
  std::string name;
  SharingMode mode = SharingMode::kShared;
  std::vector<DecisionDevice> devices;
  // How the devices' coresPercent is held (omitted from the JSON when hard with no period).
  ComputeMode compute = ComputeMode::kHard;
  std::uint32_t compute_window_ms = 0;
  bool operator==(const DecisionContainer&) const = default;
};

struct Decision {
  std::string pod_uid;
  std::string pod_namespace;
  std::string pod_name;
  std::string node;
  TrustTier tier = TrustTier::kTeam;
  PriorityClass priority = PriorityClass::kNormal;
  std::string issued_at;  // RFC 3339, UTC
  std::string key_id;
  std::vector<DecisionContainer> containers;
  bool operator==(const Decision&) const = default;
};

// One line of JSON, fields in the contract's order. The signature covers exactly these bytes.
std::string EncodeDecision(const Decision& decision);
// Refuses another apiVersion, missing fields and unknown vocabulary, naming the field.
StatusOr<Decision> ParseDecision(std::string_view text);

// Standard base64 with padding.
std::string Base64Encode(std::string_view data);

// "2026-11-30T01:02:03Z" for a time in seconds since the epoch.
std::string Rfc3339(std::int64_t unix_seconds);

// Ed25519 over the annotation's bytes (OpenSSL). The private key is a PEM file only the
// scheduler reads; node agents hold the public keys.
class Signer {
 public:
  static StatusOr<Signer> FromPem(std::string_view private_key_pem);
  Signer(Signer&&) noexcept;
  Signer& operator=(Signer&&) noexcept;
  ~Signer();
  // Base64 of the 64-byte signature.
  StatusOr<std::string> Sign(std::string_view message) const;
  // The matching public key, PEM (SubjectPublicKeyInfo).
  std::string PublicKeyPem() const;

 private:
  struct Key;
  explicit Signer(std::unique_ptr<Key> key);
  std::unique_ptr<Key> key_;
};

class Verifier {
 public:
  static StatusOr<Verifier> FromPem(std::string_view public_key_pem);
  Verifier(Verifier&&) noexcept;
  Verifier& operator=(Verifier&&) noexcept;
  ~Verifier();
  // kPermissionDenied unless `signature_base64` is a valid signature of `message`.
  Status Verify(std::string_view message, std::string_view signature_base64) const;

 private:
  struct Key;
  explicit Verifier(std::unique_ptr<Key> key);
  std::unique_ptr<Key> key_;
};

// A fresh Ed25519 private key, PEM (PKCS#8): for `tessera keygen`-style set-up and tests.
StatusOr<std::string> GenerateSigningKeyPem();

}  // namespace tessera::contract
