package main

import (
	"runtime/debug"

	"k8s.io/client-go/rest"
)

type restConfig = rest.Config

// versions: the modules this binary was built from, for state.json (the fixture prints them on failure).
func versions() map[string]string {
	out := map[string]string{}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out["go"] = info.GoVersion
	for _, m := range info.Deps {
		switch m.Path {
		case "k8s.io/kubernetes", "k8s.io/apiserver", "go.etcd.io/etcd/server/v3":
			out[m.Path] = m.Version
			if m.Replace != nil {
				out[m.Path] = m.Replace.Version
			}
		}
	}
	return out
}
