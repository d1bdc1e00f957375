// SPDX-License-Identifier: Apache-2.0

package synproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tierwall/tierwall/internal/netnsx"
)

// host is what the setup needs of a namespace: nft and sysctls. Tests use
// a fake.
type host interface {
	nft(ctx context.Context, script string) error
	// table returns our table's comment, and whether the table exists.
	table(ctx context.Context) (comment string, ok bool, err error)
	sysctl(key string) (string, error)
	setSysctl(key, value string) error
}

// nsHost runs nft through ip netns exec, and reads and writes sysctls from
// a thread inside the namespace: /proc/sys/net shows the namespace of
// whoever opens it.
type nsHost struct{ netns string }

func newHost(netns string) host { return nsHost{netns: netns} }

func (h nsHost) command(ctx context.Context, args ...string) *exec.Cmd {
	if h.netns != "" {
		args = append([]string{"ip", "netns", "exec", h.netns}, args...)
	}
	return exec.CommandContext(ctx, args[0], args[1:]...)
}

func (h nsHost) nft(ctx context.Context, script string) error {
	cmd := h.command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// table reads the comment from nft's text listing: nft's JSON output
// (1.0.6) leaves table comments out.
func (h nsHost) table(ctx context.Context) (string, bool, error) {
	var stderr bytes.Buffer
	cmd := h.command(ctx, "nft", "list", "tables", "inet")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if errors.Is(err, exec.ErrNotFound) && h.netns == "" {
		// Without nft there is no table of ours to find.
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("nft list tables: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if !slices.Contains(strings.Split(string(out), "\n"), "table inet "+Table) {
		return "", false, nil
	}
	stderr.Reset()
	cmd = h.command(ctx, "nft", "list", "table", "inet", Table)
	cmd.Stderr = &stderr
	if out, err = cmd.Output(); err != nil {
		return "", true, fmt.Errorf("nft list table inet %s: %w: %s", Table, err, bytes.TrimSpace(stderr.Bytes()))
	}
	for _, l := range strings.Split(string(out), "\n") {
		if q, ok := strings.CutPrefix(strings.TrimSpace(l), "comment "); ok {
			c, err := strconv.Unquote(q)
			if err != nil {
				return "", true, fmt.Errorf("table inet %s: comment %s: %w", Table, q, err)
			}
			return c, true, nil
		}
		if strings.HasPrefix(strings.TrimSpace(l), "chain ") {
			break // the table's own comment comes before its chains
		}
	}
	return "", true, nil
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

func (h nsHost) sysctl(key string) (string, error) {
	var v string
	err := netnsx.Do(h.netns, -1, func() error {
		b, err := os.ReadFile(sysctlPath(key))
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

func (h nsHost) setSysctl(key, value string) error {
	return netnsx.Do(h.netns, -1, func() error {
		return os.WriteFile(sysctlPath(key), []byte(value+"\n"), 0o644)
	})
}
