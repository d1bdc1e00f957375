// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierwall/tierwall/internal/control/api"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/rule"
	"github.com/tierwall/tierwall/internal/sdnotify"
)

func newRun() *cobra.Command {
	var path string
	var check, online bool
	c := &cobra.Command{
		Use:   "run [--check [--online]] --config FILE",
		Short: "Run the daemon: detection, bans, rate monitor and placement every interval, with the HTTP API",
		Long: `Runs in the foreground until SIGINT or SIGTERM. SIGHUP reloads the configuration
(a bad one is refused and the running one kept); a probe re-reads and checks it,
keeps its flows and counters, and logs the changes that need a restart. Bans live in the pinned data plane:
they keep being enforced after the daemon exits, and the next start reconciles them
with the state file.

--check validates the file and exits: 0 when the daemon would accept it, 2 with
every error (file:line: field: what is wrong) when not, including what this
binary was built without (probe.dpi.engine: ndpi). It needs neither root nor BPF,
and touches nothing. With --online it also checks this host (in this network
namespace): the interface exists, every flow collector resolves and has a
route, every BGP peer has a route and each local_address is this host's, and
each telemetry listen address is this host's; it opens no session and sends
nothing.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if online && !check {
				return fmt.Errorf("%w: --online goes with --check (run --check --online)", rule.ErrInvalid)
			}
			if check {
				return checkConfig(cmd, path, online)
			}
			cfg, err := loadConfig(path)
			if err != nil {
				return err
			}
			if g.netns != "" && cfg.BGP.Enabled() {
				// -n moves one thread; GoBGP dials its peers from threads of
				// its own, which would stay in the namespace we came from.
				return fmt.Errorf("%w: bgp needs the whole process in the network namespace: run `ip netns exec %s tierwall run ...` (or systemd's NetworkNamespacePath=) instead of -n %s",
					rule.ErrInvalid, g.netns, g.netns)
			}
			log := newLogger(cfg.Log)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// SIGHUP is caught before anything is attached: its default
			// action ends the process, and `systemctl reload` of a probe, or
			// of a daemon still starting, exited 129 with its XDP program
			// gone and its socket left behind.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{}, 1)
			go func() {
				for range hup {
					select {
					case reload <- struct{}{}:
					default:
					}
				}
			}()
			if cfg.Role == config.RoleProbe {
				p, err := probed.New(cfg, log)
				if err != nil {
					return err
				}
				if err := serveAPI(ctx, log, cfg, &api.Server{P: p, MaxBody: cfg.API.MaxBody, Token: cfg.API.Token}); err != nil {
					_ = p.Close()
					return err
				}
				if cfg.API.Socket != "" {
					defer os.Remove(cfg.API.Socket)
				}
				notifyProbe(ctx, log)
				go func() {
					for {
						select {
						case <-ctx.Done():
							return
						case <-reload:
							p.Reload(path)
						}
					}
				}()
				return p.Run(ctx)
			}
			// The loop runs on this goroutine: the one locked to the main
			// thread, in the namespace --netns chose.
			d, err := daemon.New(cfg, path, log)
			if err != nil {
				return err
			}
			if err := serveAPI(ctx, log, cfg, &api.Server{D: d, MaxBody: cfg.API.MaxBody, Token: cfg.API.Token}); err != nil {
				return err
			}
			if cfg.API.Socket != "" {
				defer os.Remove(cfg.API.Socket)
			}
			return d.Run(ctx, reload)
		},
	}
	c.Flags().StringVarP(&path, "config", "c", "/etc/tierwall/tierwall.yaml", "configuration file")
	c.Flags().BoolVar(&check, "check", false, "validate the configuration offline and exit (0: valid, 2: invalid, with every error)")
	c.Flags().BoolVar(&online, "online", false, "with --check: also check this host (the interface exists, collectors resolve, BGP peers have a route); connects to nothing")
	return c
}

// serveAPI serves srv on the configured unix socket and TCP address until
// ctx ends.
func serveAPI(ctx context.Context, log *slog.Logger, cfg *config.Config, srv *api.Server) error {
	if cfg.API.Socket != "" {
		l, err := api.ListenUnix(cfg.API.Socket)
		if err != nil {
			return fmt.Errorf("api socket: %w", err)
		}
		go func() {
			if err := api.Serve(ctx, l, srv.Handler()); err != nil {
				log.Error("api socket stopped", "err", err)
			}
		}()
		log.Info("api listening", "socket", cfg.API.Socket)
	}
	if cfg.API.TCP != "" {
		l, err := net.Listen("tcp", cfg.API.TCP)
		if err != nil {
			return fmt.Errorf("api tcp: %w", err)
		}
		go func() {
			if err := api.Serve(ctx, l, srv.Authenticated(srv.Handler())); err != nil {
				log.Error("api tcp stopped", "err", err)
			}
		}()
		log.Info("api listening", "tcp", cfg.API.TCP)
	}
	if cfg.Metrics.Listen != "" {
		l, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		go func() {
			if err := api.Serve(ctx, l, srv.MetricsHandler()); err != nil {
				log.Error("metrics listener stopped", "err", err)
			}
		}()
		log.Info("metrics listening (read-only, no token)", "tcp", cfg.Metrics.Listen)
	}
	return nil
}

func newLogger(c config.Log) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	o := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}

// notifyProbe tells systemd (Type=notify) that the probe is ready: New
// attached its tiers and the API listens. The watchdog is fed from a
// ticker while the process lives; the probe's engine has no loop of its
// own that a stall would stop, unlike the daemon's.
func notifyProbe(ctx context.Context, log *slog.Logger) {
	if _, err := sdnotify.Notify(sdnotify.Ready); err != nil {
		log.Warn("telling systemd the probe is ready", "err", err)
	}
	every := sdnotify.WatchdogInterval()
	go func() {
		var tick <-chan time.Time
		if every > 0 {
			t := time.NewTicker(every)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				_, _ = sdnotify.Notify(sdnotify.Stopping)
				return
			case <-tick:
				_, _ = sdnotify.Notify(sdnotify.Watchdog)
			}
		}
	}()
}
