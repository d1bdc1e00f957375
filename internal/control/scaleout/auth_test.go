// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tierwall/tierwall/internal/control/scaleout/natstest"
)

// pki writes a CA and, signed by it, a server certificate for 127.0.0.1
// and a client certificate, as PEM files in dir.
func pki(t *testing.T, dir string) (ca, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tierwall test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kd)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	srvCert, srvKey = leaf("server", 2, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	cliCert, cliKey = leaf("collector", 3, x509.ExtKeyUsageClientAuth, nil)
	return
}

// A server that verifies its clients takes a collector with its CA and
// certificate, and refuses one without a certificate or without the CA.
func TestConnectTLS(t *testing.T) {
	ca, sc, sk, cc, ck := pki(t, t.TempDir())
	url := natstest.StartTLS(t, sc, sk, ca)
	nc, err := Connect(url, "tls test", Auth{CA: ca, Cert: cc, Key: ck})
	if err != nil {
		t.Fatalf("with CA and client certificate: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connected without TLS")
	}
	if _, err := nc.JetStream(); err != nil {
		t.Error(err)
	}
	nc.Close()
	for name, a := range map[string]Auth{"no client certificate": {CA: ca}, "no CA": {Cert: cc, Key: ck}} {
		if nc, err := Connect(url, "tls test", a); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
}
