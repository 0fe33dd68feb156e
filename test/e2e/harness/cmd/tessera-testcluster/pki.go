package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	b64 "encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of the throw-away credentials of one test cluster.
// Everything is generated fresh per cluster and lives only in its state dir.
type pki struct {
	Dir                     string
	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	SAKey, SAPub            string
	caPEM                   []byte
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}

// generatePKI creates a CA, a serving certificate for the API server (valid
// for loopback and the in-cluster service names), a cluster-admin client
// certificate (O=system:masters) and the service-account signing key pair.
func generatePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		Dir:    dir,
		CACert: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key"),
		ServingCert: filepath.Join(dir, "apiserver.crt"), ServingKey: filepath.Join(dir, "apiserver.key"),
		AdminCert: filepath.Join(dir, "admin.crt"), AdminKey: filepath.Join(dir, "admin.key"),
		SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub"),
	}
	now := time.Now().Add(-time.Minute)
	notAfter := now.Add(7 * 24 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "tessera-e2e-ca"},
		NotBefore:             now,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.CACert, "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}
	if err := writeKey(p.CAKey, caKey); err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	leaf := func(certPath, keyPath string, tmpl *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore, tmpl.NotAfter = now, notAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		return writeKey(keyPath, key)
	}
	if err := leaf(p.ServingCert, p.ServingKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.1")},
	}); err != nil {
		return nil, fmt.Errorf("serving cert: %w", err)
	}
	if err := leaf(p.AdminCert, p.AdminKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "tessera-e2e-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("admin cert: %w", err)
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.SAKey, saKey); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.SAPub, "PUBLIC KEY", pubDER, 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// writeKubeconfig writes a cluster-admin kubeconfig with embedded credentials.
func (p *pki) writeKubeconfig(path, server string) error {
	readB64 := func(f string) (string, error) {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		return base64(b), nil
	}
	crt, err := readB64(p.AdminCert)
	if err != nil {
		return err
	}
	key, err := readB64(p.AdminKey)
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: tessera-e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: tessera-e2e-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: tessera-e2e
  context:
    cluster: tessera-e2e
    user: tessera-e2e-admin
    namespace: default
current-context: tessera-e2e
`, server, base64(p.caPEM), crt, key)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Write then rename so that a poller never reads a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func base64(b []byte) string { return b64.StdEncoding.EncodeToString(b) }
