package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/host"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// serve runs the daemon until ctx ends. Stopping it never deletes or interrupts a host
// session: it stops pulling, commits and acknowledges the batch in progress, drains the
// connection and closes the journal.
func serve(ctx context.Context, c Config, log *slog.Logger) error {
	start := time.Now()
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data folder: %w", err)
	}
	if err := os.Chmod(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("make data folder private: %w", err)
	}
	if c.InstallCommands {
		if _, err := install(c, log); err != nil {
			log.Warn("could not install the slash commands; run thatch install to retry", "err", err)
		}
	}
	store, err := journal.Open(filepath.Join(c.DataDir, "thatch.db"))
	if err != nil {
		return err
	}
	defer store.Close()

	var ns *server.Server
	if c.NATSURL == "" {
		ns, err = natsbus.StartEmbedded(c.NATSListen, filepath.Join(c.DataDir, "nats"))
		if err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
		log.Info("embedded broker listening", "url", ns.ClientURL())
	}
	nc, err := natsbus.Connect(natsbus.ConnectOptions{URL: c.NATSURL, Embedded: ns, CredsFile: c.NATSCreds,
		Token: c.NATSToken, Name: "thatch"}, log.With("component", "nats"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	loop := runtime.NewLoop(store, &host.Client{NC: nc, Prefix: c.SubjectPrefix, Timeout: c.hostTimeout(),
		Log: log.With("component", "host")}, log.With("component", "runtime"))
	loop.Rules, loop.Prefix, loop.MaxBatch, loop.WaitApplied = c.rules(), c.SubjectPrefix, c.BatchMax, c.hostTimeout()
	consumer := natsbus.NewConsumer(js, natsbus.StreamConfig{Stream: c.Stream, Consumer: c.Consumer, Prefix: c.SubjectPrefix},
		loop.Deliveries(), log.With("component", "consumer"))
	srv := &natsbus.Server{NC: nc, JS: js, Stream: c.Stream, Prefix: c.APIPrefix, Loop: loop, Consumer: consumer,
		Log: log.With("component", "api")}

	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan error, 1)
	go func() { loopDone <- loop.Run(loopCtx) }()
	consCtx, stopConsumer := context.WithCancel(context.Background())
	consDone := make(chan error, 1)
	go func() { consDone <- consumer.Run(consCtx) }()

	// Shutdown runs in reverse: responders, consumer, loop, connection.
	shutdown := func() {
		srv.Stop()
		stopConsumer()
		<-consDone
		stopLoop()
		<-loopDone
		if err := nc.Drain(); err != nil {
			log.Debug("drain", "err", err)
		}
	}

	select {
	case <-loop.Ready():
	case err := <-loopDone:
		stopConsumer()
		<-consDone
		return err
	}
	select {
	case <-consumer.Started():
	case <-ctx.Done():
		shutdown()
		return nil
	}
	if err := srv.Start(ctx); err != nil {
		shutdown()
		return fmt.Errorf("serve the thatch API: %w", err)
	}
	log.Info("thatch ready", "version", runtime.Version, "data_dir", c.DataDir, "startup", time.Since(start).Round(time.Millisecond).String())

	select {
	case <-ctx.Done():
		log.Info("stopping")
		shutdown()
		return nil
	case err := <-loopDone:
		stopLoop()
		srv.Stop()
		stopConsumer()
		<-consDone
		return err
	}
}
