// skillhost's Go SDK test skill: one mode per SDK feature (the same as pymodes).
package main

import (
	"encoding/json"
	"strings"

	"skillhost.dev/sdk"
)

type Params struct {
	Mode string `json:"mode"`
	Arg  string `json:"arg"`
}

func execute(ctx *skillhost.Context, p Params) (*skillhost.Result, error) {
	switch p.Mode {
	case "greet":
		ctx.Info("greeting %s", p.Arg)
		return skillhost.Success("hello, "+p.Arg+" from "+ctx.SessionID+" step "+itoa(ctx.Step)).
			Meta("chars", len(p.Arg)).
			Remember(skillhost.Fact, "greeted "+p.Arg+" in go", 2, "go"), nil
	case "bad":
		return nil, skillhost.InvalidParams(`arg: give a number, e.g. {"arg": "3"}`)
	case "boom":
		present := []int{1}
		i := len(p.Arg) + 5
		return skillhost.Success(itoa(uint32(present[i]))), nil
	case "search":
		hits, err := ctx.MemorySearch(p.Arg, 5)
		if err != nil {
			return nil, err
		}
		lines := make([]string, 0, len(hits))
		for _, h := range hits {
			lines = append(lines, h.Content)
		}
		return skillhost.Success(strings.Join(lines, "\n")).Meta("hits", len(hits)), nil
	case "session":
		var before, after any
		if v, ok, err := ctx.SessionGet("py"); err != nil {
			return nil, err
		} else if ok {
			before = v
		}
		if err := ctx.SessionSet("py", p.Arg); err != nil {
			return nil, err
		}
		if v, ok, err := ctx.SessionGet("py"); err != nil {
			return nil, err
		} else if ok {
			after = v
		}
		keys, err := ctx.SessionKeys()
		if err != nil {
			return nil, err
		}
		out, _ := json.Marshal(map[string]any{"before": before, "after": after, "keys": keys})
		return skillhost.Success(string(out)), nil
	}
	return nil, skillhost.InvalidParams("mode: unknown mode %q", p.Mode)
}

func itoa(n uint32) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func init() { skillhost.Handle(execute) }

func main() {}
