// Command engine-sim serves one or more simulated vLLM engines, one per listen address, each
// with independent state. See package enginesim for the model it simulates.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine-sim:", err)
		os.Exit(1)
	}
}

// run serves engines as configured by args until ctx ends, then shuts them down gracefully.
func run(ctx context.Context, args []string, log *slog.Logger) error {
	cfg := enginesim.DefaultConfig()
	fs := flag.NewFlagSet("engine-sim", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: engine-sim [flags]

Serves simulated vLLM engines, one per --listen address, each with its own state:
  POST /v1/chat/completions, /v1/completions, /v1/responses   generations, streamed or not
  POST /v1/embeddings                                          pseudo-embeddings
  POST /v1/audio/transcriptions, /v1/audio/translations        multipart audio to text
  POST /rerank, /v1/rerank, /v2/rerank, /score, /v1/score      word-overlap relevance
  POST /tokenize, /detokenize                                  the 4-bytes-per-token model
  GET  /v1/models; POST /v1/load_lora_adapter, /v1/unload_lora_adapter
  GET  /health, /metrics
  GET/POST /admin/faults to read or replace the injected faults at run time, e.g.
  {"fail_fraction":0.1,"drop_mid_stream":false,"metrics_hang":false,"unready_seconds":0,"slow_factor":1}.
With --api-key, every endpoint but /health, /metrics and /admin/faults needs the key.

Flags:
`)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8000", "comma-separated listen addresses; each serves an independent engine")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "base model name")
	fs.StringVar(&cfg.APIKey, "api-key", "", "if set, required as bearer token on the API endpoints (default: none)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "tokens per KV-cache block")
	fs.IntVar(&cfg.KVBlocks, "kv-blocks", cfg.KVBlocks, "number of KV-cache blocks")
	fs.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", cfg.MaxNumSeqs, "maximum running requests; the rest wait FIFO")
	fs.IntVar(&cfg.MaxLoRAs, "max-loras", cfg.MaxLoRAs, "maximum loaded LoRA adapters")
	fs.Func("lora-modules", "LoRA adapters loaded at start, as comma-separated `name=path` pairs; repeatable (vLLM: --lora-modules name=path ...)", func(v string) error {
		modules, err := enginesim.ParseLoRAModules(v)
		cfg.LoRAModules = append(cfg.LoRAModules, modules...)
		return err
	})
	fs.DurationVar(&cfg.LoRALoadTime, "lora-load-time", cfg.LoRALoadTime, "time to load a LoRA adapter")
	fs.DurationVar(&cfg.PrefillOverhead, "prefill-overhead", cfg.PrefillOverhead, "fixed part of the time to first token")
	fs.DurationVar(&cfg.PrefillPerToken, "prefill-per-token", cfg.PrefillPerToken, "prefill time per uncached prompt token")
	fs.Float64Var(&cfg.PrefillBatchFactor, "prefill-batch-factor", cfg.PrefillBatchFactor, "prefill slow-down per other running request")
	fs.DurationVar(&cfg.InterTokenLatency, "inter-token-latency", cfg.InterTokenLatency, "decode time per output token with a batch of one")
	fs.Float64Var(&cfg.DecodeBatchFactor, "decode-batch-factor", cfg.DecodeBatchFactor, "decode slow-down per other running request")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", cfg.DefaultMaxTokens, "mean output length when a request sets no max_tokens")
	fs.Float64Var(&cfg.TimeScale, "time-scale", cfg.TimeScale, "multiplier applied to every delay (0.01 = 100x faster)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "random seed for output lengths and texts")
	fs.Float64Var(&cfg.Faults.FailFraction, "fault-fail-fraction", 0, "fraction of inference requests answered with 500 (default 0)")
	fs.BoolVar(&cfg.Faults.DropMidStream, "fault-drop-mid-stream", false, "drop connections after the first streamed chunk (default false)")
	fs.BoolVar(&cfg.Faults.MetricsHang, "fault-metrics-hang", false, "make /metrics hang until the client gives up (default false)")
	fs.Float64Var(&cfg.Faults.UnreadySeconds, "fault-unready-seconds", 0, "answer 503 on /health for this many seconds after start (default 0)")
	fs.Float64Var(&cfg.Faults.SlowFactor, "fault-slow-factor", 1, "multiply every delay by this factor")
	if err := fs.Parse(args); err != nil {
		return err
	}

	// One engine and one HTTP server per address; the first failure stops them all.
	g, ctx := errgroup.WithContext(ctx)
	for i, addr := range strings.Split(*listen, ",") {
		engineCfg := cfg
		engineCfg.Seed = cfg.Seed + int64(i) // distinct but reproducible per instance
		engine, err := enginesim.NewEngine(engineCfg)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", strings.TrimSpace(addr))
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		srv := &http.Server{Handler: engine.Handler(), ReadHeaderTimeout: 10 * time.Second}
		log.Info("serving engine", "addr", ln.Addr().String(), "model", cfg.Model)
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve %s: %w", ln.Addr(), err)
			}
			return nil
		})
		// Graceful shutdown drains in-flight requests.
		g.Go(func() error {
			<-ctx.Done()
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return srv.Shutdown(shutdownCtx)
		})
	}
	return g.Wait()
}
