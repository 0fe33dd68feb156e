// Certificate minting (pki.h) checked with OpenSSL: chains, names, usages, key type, validity;
// and the PEM helpers (openssl.h) round-tripping what it mints.
#include "k8s/pki.h"

#include <string>

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "k8s/k8s_testing.h"
#include "k8s/openssl.h"
#include "testutil/status_matchers.h"

namespace tessera::k8s {
namespace {

// X509_V_OK when `leaf` chains to `ca` for `purpose` (X509_PURPOSE_SSL_SERVER, ..._CLIENT);
// OpenSSL's verification error otherwise.
int Verify(X509* leaf, X509* ca, int purpose) {
  X509StorePtr store(X509_STORE_new());
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), leaf, nullptr) != 1 ||
      X509_STORE_CTX_set_purpose(ctx.get(), purpose) != 1) {
    ERR_clear_error();
    return X509_V_ERR_UNSPECIFIED;
  }
  const int verified = X509_verify_cert(ctx.get());
  const int error = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return verified == 1 ? X509_V_OK : error;
}

std::string NameEntry(X509_NAME* name, int nid) {
  char text[256] = {};
  const int n = X509_NAME_get_text_by_NID(name, nid, text, sizeof(text));
  return n < 0 ? std::string() : std::string(text, static_cast<std::size_t>(n));
}

// notAfter - notBefore, in seconds.
long ValiditySeconds(const X509* cert) {
  int days = 0;
  int seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert), X509_get0_notAfter(cert)) != 1) {
    return -1;
  }
  return days * 86400L + seconds;
}

bool IsP256(const EVP_PKEY* key) {
  char group[64] = {};
  std::size_t length = 0;
  return EVP_PKEY_get_base_id(key) == EVP_PKEY_EC &&
         EVP_PKEY_get_group_name(key, group, sizeof(group), &length) == 1 &&
         std::string(group, length) == "prime256v1";
}

TEST(Pki, ServingCertificateChainsToItsCaAndCarriesItsNames) {
  StatusOr<CertifiedKey> ca = MintCa("pki-test-ca", 2);
  ASSERT_OK(ca);
  StatusOr<CertifiedKey> server = MintLeaf(*ca, {.common_name = "tessera-webhook",
                                                 .organization = "",
                                                 .usage = CertUsage::kServer,
                                                 .subject_alt_names = "IP:127.0.0.1,DNS:localhost",
                                                 .days = 2});
  ASSERT_OK(server);
  EXPECT_EQ(ERR_peek_error(), 0UL);  // minting leaves the error queue empty

  // The CA: self-signed, a CA, EC P-256, named as asked.
  X509* ca_cert = ca->cert.get();
  EXPECT_EQ(X509_check_ca(ca_cert), 1);
  EXPECT_EQ(X509_check_issued(ca_cert, ca_cert), X509_V_OK);
  EXPECT_EQ(NameEntry(X509_get_subject_name(ca_cert), NID_commonName), "pki-test-ca");
  EXPECT_TRUE(IsP256(ca->key.get()));
  EXPECT_EQ(X509_check_private_key(ca_cert, ca->key.get()), 1);
  EXPECT_EQ(ValiditySeconds(ca_cert), 2 * 86400L + 3600);  // from an hour ago, for two days
  EXPECT_LT(X509_cmp_current_time(X509_get0_notBefore(ca_cert)), 0);
  EXPECT_GT(X509_cmp_current_time(X509_get0_notAfter(ca_cert)), 0);

  // The serving certificate: not a CA, signed by the CA, for its names only.
  X509* cert = server->cert.get();
  EXPECT_EQ(X509_check_ca(cert), 0);
  EXPECT_EQ(X509_check_issued(ca_cert, cert), X509_V_OK);
  EXPECT_EQ(NameEntry(X509_get_subject_name(cert), NID_commonName), "tessera-webhook");
  EXPECT_EQ(NameEntry(X509_get_subject_name(cert), NID_organizationName), "");
  EXPECT_EQ(NameEntry(X509_get_issuer_name(cert), NID_commonName), "pki-test-ca");
  EXPECT_TRUE(IsP256(server->key.get()));
  EXPECT_EQ(X509_check_private_key(cert, server->key.get()), 1);
  EXPECT_EQ(ValiditySeconds(cert), 2 * 86400L + 3600);
  EXPECT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(cert), X509_get0_serialNumber(ca_cert)), 0);
  EXPECT_EQ(Verify(cert, ca_cert, X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_NE(Verify(cert, ca_cert, X509_PURPOSE_SSL_CLIENT), X509_V_OK);  // serverAuth only
  EXPECT_EQ(X509_check_host(cert, "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(cert, "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_host(cert, "example.com", 0, 0, nullptr), 0);
  EXPECT_EQ(X509_check_ip_asc(cert, "127.0.0.2", 0), 0);
  EXPECT_NE(X509_get_ext_by_NID(cert, NID_authority_key_identifier, -1), -1);

  // Another CA's certificate does not chain to this one.
  StatusOr<CertifiedKey> other = MintCa("pki-test-ca", 2);
  ASSERT_OK(other);
  EXPECT_NE(Verify(cert, other->cert.get(), X509_PURPOSE_SSL_SERVER), X509_V_OK);
}

TEST(Pki, ClientCertificateCarriesItsOrganizationAndNoNames) {
  StatusOr<CertifiedKey> ca = MintCa("pki-client-ca", 1);
  ASSERT_OK(ca);
  StatusOr<CertifiedKey> client = MintLeaf(*ca, {.common_name = "someone",
                                                 .organization = "system:masters",
                                                 .usage = CertUsage::kClient,
                                                 .subject_alt_names = "",
                                                 .days = 1});
  ASSERT_OK(client);
  X509* cert = client->cert.get();
  EXPECT_EQ(NameEntry(X509_get_subject_name(cert), NID_commonName), "someone");
  EXPECT_EQ(NameEntry(X509_get_subject_name(cert), NID_organizationName), "system:masters");
  EXPECT_EQ(ValiditySeconds(cert), 86400L + 3600);
  EXPECT_EQ(X509_get_ext_by_NID(cert, NID_subject_alt_name, -1), -1);
  EXPECT_EQ(Verify(cert, ca->cert.get(), X509_PURPOSE_SSL_CLIENT), X509_V_OK);
  EXPECT_NE(Verify(cert, ca->cert.get(), X509_PURPOSE_SSL_SERVER), X509_V_OK);  // clientAuth only
}

TEST(Pki, BadSubjectAltNameIsAnErrorWithOpenSslsReason) {
  StatusOr<CertifiedKey> ca = MintCa("pki-bad-ca", 1);
  ASSERT_OK(ca);
  StatusOr<CertifiedKey> leaf = MintLeaf(*ca, {.common_name = "x",
                                               .organization = "",
                                               .usage = CertUsage::kServer,
                                               .subject_alt_names = "NOPE:what",
                                               .days = 1});
  ASSERT_FALSE(leaf.ok());
  EXPECT_EQ(leaf.status().code(), StatusCode::kInternal);
  EXPECT_NE(leaf.status().message().find("PKI: extension NOPE:what: "), std::string::npos)
      << leaf.status().message();
  EXPECT_EQ(ERR_peek_error(), 0UL);
}

TEST(OpenSsl, PemRoundTrips) {
  StatusOr<CertifiedKey> ca = MintCa("pem-ca", 1);
  ASSERT_OK(ca);
  StatusOr<CertifiedKey> leaf = MintLeaf(*ca, {.common_name = "pem-leaf",
                                               .organization = "",
                                               .usage = CertUsage::kServer,
                                               .subject_alt_names = "",
                                               .days = 1});
  ASSERT_OK(leaf);

  StatusOr<std::string> ca_pem = CertificatePem(ca->cert.get());
  StatusOr<std::string> leaf_pem = CertificatePem(leaf->cert.get());
  ASSERT_OK(ca_pem);
  ASSERT_OK(leaf_pem);
  EXPECT_EQ(ca_pem->rfind("-----BEGIN CERTIFICATE-----\n", 0), 0U);
  // A chain file: both certificates, in order.
  std::vector<X509Ptr> certs = ReadCertificates(*leaf_pem + *ca_pem);
  ASSERT_EQ(certs.size(), 2U);
  EXPECT_EQ(X509_cmp(certs[0].get(), leaf->cert.get()), 0);
  EXPECT_EQ(X509_cmp(certs[1].get(), ca->cert.get()), 0);
  EXPECT_EQ(ERR_peek_error(), 0UL);
  EXPECT_EQ(Verify(certs[0].get(), certs[1].get(), X509_PURPOSE_SSL_SERVER), X509_V_OK);

  StatusOr<std::string> key_pem = PrivateKeyPem(leaf->key.get());
  ASSERT_OK(key_pem);
  EXPECT_EQ(key_pem->rfind("-----BEGIN PRIVATE KEY-----\n", 0), 0U);  // PKCS#8, unencrypted
  PkeyPtr key = ReadPrivateKey(*key_pem);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(EVP_PKEY_eq(key.get(), leaf->key.get()), 1);
  EXPECT_EQ(X509_check_private_key(certs[0].get(), key.get()), 1);

  StatusOr<std::string> public_pem = PublicKeyPem(leaf->key.get());
  ASSERT_OK(public_pem);
  EXPECT_EQ(public_pem->rfind("-----BEGIN PUBLIC KEY-----\n", 0), 0U);
  PkeyPtr public_key = ReadPublicKey(*public_pem);
  ASSERT_NE(public_key, nullptr);
  EXPECT_EQ(EVP_PKEY_eq(public_key.get(), leaf->key.get()), 1);
  EXPECT_EQ(ReadPrivateKey(*public_pem), nullptr);  // a public key is no private key
  ERR_clear_error();
}

TEST(OpenSsl, GarbageReadsAsNothingAndErrorsReadAsText) {
  EXPECT_TRUE(ReadCertificates("garbage").empty());
  EXPECT_TRUE(ReadCertificates("").empty());
  EXPECT_EQ(ERR_peek_error(), 0UL);  // the end of the input is no error

  EXPECT_EQ(ReadPrivateKey("garbage"), nullptr);
  EXPECT_NE(ERR_peek_error(), 0UL);  // the reason stays queued for OpenSslErrors()
  const std::string errors = OpenSslErrors();
  EXPECT_NE(errors.find("error:"), std::string::npos) << errors;
  EXPECT_EQ(ERR_peek_error(), 0UL);
  EXPECT_EQ(OpenSslErrors(), "");
  EXPECT_EQ(ReadPublicKey("garbage"), nullptr);
  EXPECT_NE(OpenSslErrors(), "");
}

// The test helpers' certificates (k8s_testing.h) come from the same minting.
TEST(Pki, TestingPkiChainsAndNamesAsTheTestsExpect) {
  StatusOr<testing::Pki> pki = testing::MakePki("testing-ca", "IP:127.0.0.1");
  ASSERT_OK(pki);
  std::vector<X509Ptr> ca = ReadCertificates(pki->ca_pem);
  std::vector<X509Ptr> server = ReadCertificates(pki->server_cert_pem);
  std::vector<X509Ptr> client = ReadCertificates(pki->client_cert_pem);
  ASSERT_EQ(ca.size(), 1U);
  ASSERT_EQ(server.size(), 1U);
  ASSERT_EQ(client.size(), 1U);
  EXPECT_EQ(NameEntry(X509_get_subject_name(ca[0].get()), NID_commonName), "testing-ca");
  EXPECT_EQ(Verify(server[0].get(), ca[0].get(), X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_EQ(X509_check_ip_asc(server[0].get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_host(server[0].get(), "localhost", 0, 0, nullptr), 0);
  EXPECT_EQ(Verify(client[0].get(), ca[0].get(), X509_PURPOSE_SSL_CLIENT), X509_V_OK);
  EXPECT_EQ(NameEntry(X509_get_subject_name(client[0].get()), NID_commonName), "tessera-test");
  EXPECT_EQ(NameEntry(X509_get_subject_name(client[0].get()), NID_organizationName),
            "system:masters");
  PkeyPtr server_key = ReadPrivateKey(pki->server_key_pem);
  PkeyPtr client_key = ReadPrivateKey(pki->client_key_pem);
  ASSERT_NE(server_key, nullptr);
  ASSERT_NE(client_key, nullptr);
  EXPECT_TRUE(IsP256(server_key.get()));
  EXPECT_EQ(X509_check_private_key(server[0].get(), server_key.get()), 1);
  EXPECT_EQ(X509_check_private_key(client[0].get(), client_key.get()), 1);
  EXPECT_EQ(ValiditySeconds(ca[0].get()), 86400L + 3600);
}

}  // namespace
}  // namespace tessera::k8s
