//go:build ignore

// gen writes the scripts that package lua embeds into gen/ (go generate
// ./lua runs it): see package luagen.
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/ginlimit/ginlimit/lua/internal/luagen"
)

func main() {
	files, err := luagen.Files(os.DirFS("."))
	if err != nil {
		log.Fatal(err)
	}
	old, err := filepath.Glob(filepath.Join("gen", "*.lua"))
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range old {
		if _, ok := files[filepath.Base(name)]; !ok {
			if err := os.Remove(name); err != nil {
				log.Fatal(err)
			}
		}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join("gen", name), []byte(text), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
