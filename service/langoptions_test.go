package service_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// publicPackage is the proto package of the API clients generate code for.
const publicPackage = "agentd.v1"

// readContract decodes the descriptor set `make generate` writes and
// reflection serves: the files a user of another language generates from.
func readContract(t *testing.T) *descriptorpb.FileDescriptorSet {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("apidoc", "agentd.binpb"))
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(raw, set); err != nil {
		t.Fatal(err)
	}
	return set
}

// TestContractLanguageOptions checks that every public proto file names
// its package for each language protoc generates for, so Java gets
// dev.agentd.v1.PromptRequest (not Service.PromptRequest) and Objective-C
// prefixed classes, and that every file of the package agrees: files of one
// package that disagree would land in different namespaces.
func TestContractLanguageOptions(t *testing.T) {
	want := map[string]string{
		"java_package":        "dev.agentd.v1",
		"java_multiple_files": "true",
		"csharp_namespace":    "Agentd.V1",
		"objc_class_prefix":   "AGD",
		"php_namespace":       `Agentd\V1`,
		"ruby_package":        "Agentd::V1",
		"swift_prefix":        "AGD",
	}
	outer := map[string]string{}
	files := 0
	for _, f := range readContract(t).GetFile() {
		if f.GetPackage() != publicPackage {
			continue
		}
		files++
		o := f.GetOptions()
		got := map[string]string{
			"java_package":        o.GetJavaPackage(),
			"java_multiple_files": map[bool]string{true: "true", false: "false"}[o.GetJavaMultipleFiles()],
			"csharp_namespace":    o.GetCsharpNamespace(),
			"objc_class_prefix":   o.GetObjcClassPrefix(),
			"php_namespace":       o.GetPhpNamespace(),
			"ruby_package":        o.GetRubyPackage(),
			"swift_prefix":        o.GetSwiftPrefix(),
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: option %s = %q, want %q", f.GetName(), name, got[name], w)
			}
		}
		// One outer class per file: two files with the same one would
		// generate the same Java class twice.
		cls := o.GetJavaOuterClassname()
		if cls == "" {
			t.Errorf("%s: no java_outer_classname", f.GetName())
		} else if other, dup := outer[cls]; dup {
			t.Errorf("%s and %s share java_outer_classname %q", other, f.GetName(), cls)
		}
		outer[cls] = f.GetName()
	}
	if files == 0 {
		t.Fatalf("the descriptor set has no file of package %s", publicPackage)
	}
}

// TestContractGeneratesForOtherLanguages runs protoc's own Java and
// Objective-C generators over the descriptor set, as a user of those
// languages would, and looks for the class names the options promise.
func TestContractGeneratesForOtherLanguages(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc is not installed (make deb-deps installs it)")
	}
	var names []string
	for _, f := range readContract(t).GetFile() {
		if f.GetPackage() == publicPackage {
			names = append(names, f.GetName())
		}
	}
	out := t.TempDir()
	java, objc := filepath.Join(out, "java"), filepath.Join(out, "objc")
	for _, d := range []string{java, objc} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"--descriptor_set_in=" + filepath.Join("apidoc", "agentd.binpb"),
		"--java_out=" + java, "--objc_out=" + objc}, names...)
	if msg, err := exec.Command(protoc, args...).CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, msg)
	}
	if _, err := os.Stat(filepath.Join(java, "dev", "agentd", "v1", "PromptRequest.java")); err != nil {
		t.Errorf("Java: no top-level dev.agentd.v1.PromptRequest: %v", err)
	}
	header, err := os.ReadFile(filepath.Join(objc, "agentd", "v1", "Service.pbobjc.h"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(header), "@interface AGDPromptRequest ") {
		t.Error("Objective-C: no AGDPromptRequest class in Service.pbobjc.h")
	}
}
