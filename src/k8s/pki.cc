#include "k8s/pki.h"

#include <utility>
#include <vector>

#include <openssl/err.h>
#include <openssl/x509v3.h>

namespace tessera::k8s {
namespace {

Status PkiError(const std::string& what) {
  const std::string reason = OpenSslErrors();
  return InternalError("PKI: " + what + (reason.empty() ? "" : ": " + reason));
}

StatusOr<PkeyPtr> NewKey() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return PkiError("EC key generation");
  return key;
}

// A certificate for `key` signed by `issuer` (self-signed when it is null).
StatusOr<X509Ptr> NewCert(EVP_PKEY* key, const std::string& common_name,
                          const std::string& organization, const CertifiedKey* issuer, int days,
                          const std::vector<std::pair<int, std::string>>& extensions) {
  X509Ptr cert(X509_new());
  if (!cert) return PkiError("X509_new");
  BignumPtr serial(BN_new());
  if (!serial || BN_rand(serial.get(), 64, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return PkiError("serial number");
  }
  if (X509_set_version(cert.get(), 2) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400L * days) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return PkiError("certificate fields");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  const auto text = [](const std::string& s) {
    return reinterpret_cast<const unsigned char*>(s.c_str());
  };
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, text(common_name), -1, -1, 0) != 1 ||
      (!organization.empty() &&
       X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, text(organization), -1, -1, 0) != 1)) {
    return PkiError("subject");
  }
  X509* signer = issuer != nullptr ? issuer->cert.get() : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1) {
    return PkiError("issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    X509ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
    if (!ext || X509_add_ext(cert.get(), ext.get(), -1) != 1) {
      return PkiError("extension " + value);
    }
  }
  if (X509_sign(cert.get(), issuer != nullptr ? issuer->key.get() : key, EVP_sha256()) == 0) {
    return PkiError("signing");
  }
  return cert;
}

}  // namespace

StatusOr<CertifiedKey> MintCa(const std::string& common_name, int days) {
  CertifiedKey ca;
  TESSERA_ASSIGN_OR_RETURN(ca.key, NewKey());
  TESSERA_ASSIGN_OR_RETURN(ca.cert, NewCert(ca.key.get(), common_name, "", nullptr, days,
                                            {{NID_basic_constraints, "critical,CA:TRUE"},
                                             {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                             {NID_subject_key_identifier, "hash"}}));
  ERR_clear_error();
  return ca;
}

StatusOr<CertifiedKey> MintLeaf(const CertifiedKey& ca, const LeafSpec& spec) {
  std::vector<std::pair<int, std::string>> extensions = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
      {NID_ext_key_usage, spec.usage == CertUsage::kServer ? "serverAuth" : "clientAuth"}};
  if (!spec.subject_alt_names.empty()) {
    extensions.emplace_back(NID_subject_alt_name, spec.subject_alt_names);
  }
  extensions.emplace_back(NID_authority_key_identifier, "keyid:always");
  CertifiedKey leaf;
  TESSERA_ASSIGN_OR_RETURN(leaf.key, NewKey());
  TESSERA_ASSIGN_OR_RETURN(leaf.cert, NewCert(leaf.key.get(), spec.common_name, spec.organization,
                                              &ca, spec.days, extensions));
  ERR_clear_error();
  return leaf;
}

}  // namespace tessera::k8s
