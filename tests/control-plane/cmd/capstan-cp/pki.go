package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki holds the files of the control plane's throwaway certificate authority.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}

// newPKI creates a CA, the API server's serving certificate and the
// service-account signing key pair in dir.
func newPKI(dir string, serviceIP net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "capstan-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: caCert, caKey: caKey}
	if err := writePEM(p.path("ca.crt"), "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	if err := writeKey(p.path("ca.key"), caKey); err != nil {
		return nil, err
	}
	// API server serving certificate.
	if err := p.issue("apiserver", "kube-apiserver", nil, true,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), serviceIP}); err != nil {
		return nil, err
	}
	// Service-account token signing key pair.
	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.path("sa.key"), saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.path("sa.pub"), "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// issue writes <name>.crt and <name>.key signed by the CA.
func (p *pki) issue(name, cn string, orgs []string, server bool, dns []string, ips []net.IP) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.path(name+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(p.path(name+".key"), key)
}

// kubeconfig issues a client certificate for user (CN) and groups (O) and
// writes a self-contained kubeconfig to path.
func (p *pki) kubeconfig(path, server, user string, groups []string) error {
	name := filepath.Base(path)
	if err := p.issue("client-"+name, user, groups, false, nil, nil); err != nil {
		return fmt.Errorf("client certificate for %s: %w", user, err)
	}
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return err
	}
	crt, err := os.ReadFile(p.path("client-" + name + ".crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.path("client-" + name + ".key"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["capstan-test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["capstan-test"] = &clientcmdapi.Context{Cluster: "capstan-test", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "capstan-test"
	return clientcmd.WriteToFile(*cfg, path)
}
