#include "contract/decision.h"

#include <ctime>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "tessera/limits.h"
#include "tessera/quantity.h"

#include "k8s/openssl.h"

namespace tessera::contract {
namespace {

using ordered_json = nlohmann::ordered_json;
using nlohmann::json;

using k8s::MdCtxPtr;
using k8s::PkeyPtr;

std::string Base64(const unsigned char* data, std::size_t size) {
  std::string out(4 * ((size + 2) / 3), '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(size));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> Unbase64(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  std::size_t len = static_cast<std::size_t>(n);
  if (text.back() == '=') --len;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --len;
  out.resize(len);
  return out;
}

StatusOr<std::string> NeedString(const json& object, const std::string& field,
                                 const std::string& where) {
  auto it = object.find(field);
  if (it == object.end() || !it->is_string() || it->get<std::string>().empty()) {
    return InvalidArgumentError("decision: " + where + field + ": expected a non-empty string");
  }
  return it->get<std::string>();
}

}  // namespace

std::string Base64Encode(std::string_view data) {
  return Base64(reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

std::string Rfc3339(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string EncodeDecision(const Decision& d) {
  ordered_json out;
  out["apiVersion"] = kDecisionApiVersion;
  out["pod"] = {{"uid", d.pod_uid}, {"namespace", d.pod_namespace}, {"name", d.pod_name}};
  out["node"] = d.node;
  out["tier"] = Name(d.tier);
  out["priority"] = Name(d.priority);
  out["issuedAt"] = d.issued_at;
  out["keyId"] = d.key_id;
  ordered_json containers = ordered_json::array();
  for (const DecisionContainer& c : d.containers) {
    ordered_json devices = ordered_json::array();
    for (const DecisionDevice& dev : c.devices) {
      devices.push_back({{"uuid", dev.uuid},
                         {"memoryBytes", dev.memory_bytes},
                         {"coresPercent", dev.cores_percent}});
    }
    ordered_json container = {{"name", c.name}, {"mode", Name(c.mode)}};
    if (c.compute != ComputeMode::kHard) container["compute"] = Name(c.compute);
    if (c.compute_window_ms != 0) container["computeWindowMs"] = c.compute_window_ms;
    container["devices"] = devices;
    containers.push_back(container);
  }
  out["containers"] = containers;
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<Decision> ParseDecision(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("decision: not a JSON object");
  }
  auto api = j.find("apiVersion");
  if (api == j.end() || !api->is_string() || *api != kDecisionApiVersion) {
    return InvalidArgumentError("decision: apiVersion: expected " +
                                std::string(kDecisionApiVersion));
  }
  Decision d;
  auto pod = j.find("pod");
  if (pod == j.end() || !pod->is_object()) return InvalidArgumentError("decision: pod: missing");
  TESSERA_ASSIGN_OR_RETURN(d.pod_uid, NeedString(*pod, "uid", "pod."));
  TESSERA_ASSIGN_OR_RETURN(d.pod_namespace, NeedString(*pod, "namespace", "pod."));
  TESSERA_ASSIGN_OR_RETURN(d.pod_name, NeedString(*pod, "name", "pod."));
  TESSERA_ASSIGN_OR_RETURN(d.node, NeedString(j, "node", ""));
  TESSERA_ASSIGN_OR_RETURN(d.issued_at, NeedString(j, "issuedAt", ""));
  TESSERA_ASSIGN_OR_RETURN(d.key_id, NeedString(j, "keyId", ""));
  TESSERA_ASSIGN_OR_RETURN(std::string tier, NeedString(j, "tier", ""));
  TESSERA_ASSIGN_OR_RETURN(d.tier, ParseTrustTier(tier));
  TESSERA_ASSIGN_OR_RETURN(std::string priority, NeedString(j, "priority", ""));
  TESSERA_ASSIGN_OR_RETURN(d.priority, ParsePriorityClass(priority));
  auto containers = j.find("containers");
  if (containers == j.end() || !containers->is_array() || containers->empty()) {
    return InvalidArgumentError("decision: containers: expected a non-empty array");
  }
  for (std::size_t i = 0; i < containers->size(); ++i) {
    const json& c = (*containers)[i];
    const std::string where = "containers[" + std::to_string(i) + "].";
    if (!c.is_object()) return InvalidArgumentError("decision: " + where + ": expected an object");
    DecisionContainer out;
    TESSERA_ASSIGN_OR_RETURN(out.name, NeedString(c, "name", where));
    TESSERA_ASSIGN_OR_RETURN(std::string mode, NeedString(c, "mode", where));
    TESSERA_ASSIGN_OR_RETURN(out.mode, ParseSharingMode(mode));
    if (auto compute = c.find("compute"); compute != c.end()) {  // optional: hard
      if (!compute->is_string())
        return InvalidArgumentError("decision: " + where + "compute: expected a string");
      auto mode_of_share = ParseComputeMode(compute->get<std::string>());
      if (!mode_of_share.ok())
        return mode_of_share.status().WithContext("decision: " + where + "compute");
      out.compute = *mode_of_share;
    }
    if (auto window = c.find("computeWindowMs"); window != c.end()) {  // optional: none
      if (!window->is_number_unsigned() || !IsComputeWindowMs(window->get<std::uint64_t>()) ||
          out.compute != ComputeMode::kHard) {
        return InvalidArgumentError("decision: " + where + "computeWindowMs: expected " +
                                    ComputeWindowRange() + " with compute hard");
      }
      out.compute_window_ms = window->get<std::uint32_t>();
    }
    auto devices = c.find("devices");
    if (devices == c.end() || !devices->is_array() || devices->empty()) {
      return InvalidArgumentError("decision: " + where + "devices: expected a non-empty array");
    }
    for (std::size_t k = 0; k < devices->size(); ++k) {
      const json& dev = (*devices)[k];
      const std::string dw = where + "devices[" + std::to_string(k) + "].";
      if (!dev.is_object()) return InvalidArgumentError("decision: " + dw + ": expected an object");
      DecisionDevice out_dev;
      TESSERA_ASSIGN_OR_RETURN(out_dev.uuid, NeedString(dev, "uuid", dw));
      auto mem = dev.find("memoryBytes");
      auto cores = dev.find("coresPercent");
      if (mem == dev.end() || !mem->is_number_unsigned()) {
        return InvalidArgumentError("decision: " + dw + "memoryBytes: expected an integer");
      }
      if (cores == dev.end() || !cores->is_number_unsigned() || cores->get<std::uint64_t>() > 100) {
        return InvalidArgumentError("decision: " + dw + "coresPercent: expected 0-100");
      }
      out_dev.memory_bytes = mem->get<std::uint64_t>();
      out_dev.cores_percent = cores->get<std::uint32_t>();
      out.devices.push_back(std::move(out_dev));
    }
    d.containers.push_back(std::move(out));
  }
  return d;
}

// --- Ed25519 -------------------------------------------------------------------------------

struct Signer::Key {
  PkeyPtr pkey;
};
Signer::Signer(std::unique_ptr<Key> key) : key_(std::move(key)) {}
Signer::Signer(Signer&&) noexcept = default;
Signer& Signer::operator=(Signer&&) noexcept = default;
Signer::~Signer() = default;

StatusOr<Signer> Signer::FromPem(std::string_view pem) {
  PkeyPtr key = k8s::ReadPrivateKey(pem);
  if (!key || EVP_PKEY_get_base_id(key.get()) != EVP_PKEY_ED25519) {
    return InvalidArgumentError(
        "signing key: expected an Ed25519 private key in PEM (PKCS#8); "
        "e.g. `openssl genpkey -algorithm ed25519`");
  }
  return Signer(std::make_unique<Key>(Key{std::move(key)}));
}

StatusOr<std::string> Signer::Sign(std::string_view message) const {
  MdCtxPtr ctx(EVP_MD_CTX_new());
  unsigned char sig[64];
  std::size_t sig_len = sizeof(sig);
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &sig_len,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1) {
    return InternalError("Ed25519 signing failed");
  }
  return Base64(sig, sig_len);
}

std::string Signer::PublicKeyPem() const {
  StatusOr<std::string> pem = k8s::PublicKeyPem(key_->pkey.get());
  return pem.ok() ? std::move(*pem) : std::string();
}

struct Verifier::Key {
  PkeyPtr pkey;
};
Verifier::Verifier(std::unique_ptr<Key> key) : key_(std::move(key)) {}
Verifier::Verifier(Verifier&&) noexcept = default;
Verifier& Verifier::operator=(Verifier&&) noexcept = default;
Verifier::~Verifier() = default;

StatusOr<Verifier> Verifier::FromPem(std::string_view pem) {
  PkeyPtr key = k8s::ReadPublicKey(pem);
  if (!key || EVP_PKEY_get_base_id(key.get()) != EVP_PKEY_ED25519) {
    return InvalidArgumentError("verification key: expected an Ed25519 public key in PEM");
  }
  return Verifier(std::make_unique<Key>(Key{std::move(key)}));
}

Status Verifier::Verify(std::string_view message, std::string_view signature_base64) const {
  auto sig = Unbase64(signature_base64);
  if (!sig || sig->size() != 64) {
    return PermissionDeniedError("decision signature: not 64 bytes of base64");
  }
  MdCtxPtr ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig->data()), sig->size(),
                       reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) != 1) {
    return PermissionDeniedError("decision signature: does not verify");
  }
  return Status::Ok();
}

StatusOr<std::string> GenerateSigningKeyPem() {
  EVP_PKEY* raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (raw == nullptr) return InternalError("Ed25519 key generation failed");
  PkeyPtr key(raw);
  StatusOr<std::string> pem = k8s::PrivateKeyPem(key.get());
  if (!pem.ok()) return InternalError("Ed25519 key: PEM encoding failed");
  return pem;
}

}  // namespace tessera::contract
