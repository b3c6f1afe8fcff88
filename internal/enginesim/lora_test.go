package enginesim

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestLoRAModulesAreServedFromTheStart(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxLoRAs = 2
	cfg.LoRAModules = []LoRAModule{{Name: "sql-lora", Path: "/a/sql"}, {Name: "chat-lora", Path: "/a/chat"}}
	te := startEngine(t, cfg)
	page, err := te.client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 3 || page.Data[1].ID != "chat-lora" || page.Data[2].ID != "sql-lora" {
		t.Fatalf("models %+v", page.Data)
	}
	for _, card := range page.Data[1:] {
		if got := card.JSON.ExtraFields["parent"].Raw(); got != `"llama-3-8b"` {
			t.Fatalf("%s has parent %s, want the base model", card.ID, got)
		}
	}
	if status, body := te.post(t, "/v1/embeddings", map[string]any{"model": "sql-lora", "input": "x"}); status != http.StatusOK {
		t.Fatalf("embedding on a start-up adapter: %d %s", status, body)
	}
	if status, body := te.post(t, "/v1/load_lora_adapter", loraRequest{"third", "/a/3"}); status != http.StatusBadRequest || !strings.Contains(body, "max_loras") {
		t.Fatalf("start-up adapters must count against max-loras: %d %s", status, body)
	}
	if status, body := te.post(t, "/v1/unload_lora_adapter", map[string]string{"lora_name": "sql-lora"}); status != http.StatusOK {
		t.Fatalf("unload a start-up adapter: %d %s", status, body)
	}
}

func TestParseLoRAModules(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []LoRAModule
		err  string
	}{
		{in: "sql=/a/sql", want: []LoRAModule{{"sql", "/a/sql"}}},
		{in: "sql=/a/sql, chat=s3://b/chat=1", want: []LoRAModule{{"sql", "/a/sql"}, {"chat", "s3://b/chat=1"}}},
		{in: "sql", err: `lora module "sql": want name=path`},
		{in: "=/a", err: "want name=path"},
		{in: "sql=/a,", err: "want name=path"},
	} {
		got, err := ParseLoRAModules(c.in)
		if (c.err == "" && err != nil) || (c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err))) || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseLoRAModules(%q) = %v, %v; want %v, error %q", c.in, got, err, c.want, c.err)
		}
	}
}

func TestValidateLoRAModules(t *testing.T) {
	for _, c := range []struct {
		name    string
		modules []LoRAModule
		err     string
	}{
		{"valid", []LoRAModule{{"a", "/a"}, {"b", "/b"}}, ""},
		{"too many", []LoRAModule{{"a", "/a"}, {"b", "/b"}, {"c", "/c"}}, "3 lora modules exceed max loras 2"},
		{"duplicate", []LoRAModule{{"a", "/a"}, {"a", "/b"}}, `lora module "a": name already used`},
		{"base model name", []LoRAModule{{"llama-3-8b", "/a"}}, "name already used by the model"},
		{"empty path", []LoRAModule{{"a", ""}}, "name and path must not be empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.MaxLoRAs = 2
			cfg.LoRAModules = c.modules
			err := cfg.Validate()
			if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("Validate() = %v, want error %q", err, c.err)
			}
		})
	}
}
