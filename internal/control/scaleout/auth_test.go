// SPDX-License-Identifier: Apache-2.0

package scaleout

import (
	"context"
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
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

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

// operator writes what a NATS server in operator mode and one of its
// users need: an operator, an account with JetStream signed by it, a
// user of that account and its credentials file, and the server's
// configuration (the account preloaded in a memory resolver); stranger
// is the credentials of a user signed by an account the server does
// not know.
func operator(t *testing.T, dir string) (conf, creds, stranger string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "tierwall-test"
	ojwt, err := oc.Encode(okp)
	must(err)
	user := func(akp nkeys.KeyPair, name string) string {
		ukp, err := nkeys.CreateUser()
		must(err)
		upub, _ := ukp.PublicKey()
		uc := jwt.NewUserClaims(upub)
		uc.Name = name
		ujwt, err := uc.Encode(akp)
		must(err)
		seed, _ := ukp.Seed()
		b, err := jwt.FormatUserConfig(ujwt, seed)
		must(err)
		p := filepath.Join(dir, name+".creds")
		must(os.WriteFile(p, b, 0o600))
		return p
	}
	account := func(name string, js bool) (nkeys.KeyPair, string, string) {
		akp, err := nkeys.CreateAccount()
		must(err)
		apub, _ := akp.PublicKey()
		ac := jwt.NewAccountClaims(apub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		ajwt, err := ac.Encode(okp)
		must(err)
		return akp, apub, ajwt
	}
	akp, apub, ajwt := account("tierwall", true)
	creds = user(akp, "collector")
	other, _, _ := account("elsewhere", true)
	stranger = user(other, "stranger")
	// JetStream needs the server's system account.
	_, spub, sjwt := account("SYS", false)
	conf = filepath.Join(dir, "server.conf")
	must(os.WriteFile(conf, []byte(fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n  %s: %q\n}\n",
		ojwt, spub, apub, ajwt, spub, sjwt)), 0o600))
	return conf, creds, stranger
}

// A server in operator mode (JWTs, no user list) takes a collector with
// its account's credentials file, JetStream included, and refuses one
// without credentials or with a user of an account it does not know.
func TestConnectOperatorCredentials(t *testing.T) {
	conf, creds, stranger := operator(t, t.TempDir())
	url := natstest.StartConfig(t, conf)
	nc, err := Connect(url, "creds test", Auth{Credentials: creds})
	if err != nil {
		t.Fatalf("with the account's credentials: %v", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStream(ctx, js, StreamConfig{Name: "CREDS", Subject: "creds"}); err != nil {
		t.Fatalf("JetStream in the account: %v", err)
	}
	for name, a := range map[string]Auth{"no credentials": {}, "another account's user": {Credentials: stranger}} {
		if nc, err := Connect(url, "creds test", a); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
	if _, err := Connect(url, "creds test", Auth{Credentials: filepath.Join(t.TempDir(), "missing.creds")}); err == nil {
		t.Error("a missing credentials file: connected")
	}
}
