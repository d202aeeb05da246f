package flagalias

import (
	"flag"
	"fmt"
	"log/slog"
)

// Alias is a deprecated flag name and the name that replaced it.
type Alias struct {
	Old, New string
}

// value is the alias flag: it sets the new flag's value. The flag package
// builds a zero value of this type to tell whether a default is worth
// printing, so its methods must work on a zero value too.
type value struct {
	target  flag.Value
	newName string
}

func (v *value) String() string {
	if v == nil || v.target == nil {
		return ""
	}
	return v.target.String()
}

func (v *value) Set(s string) error { return v.target.Set(s) }

// boolValue lets an alias of a bool flag be given without a value, as
// the flag it stands for can.
type boolValue struct{ value }

func (*boolValue) IsBoolFlag() bool { return true }

// Add registers old on fs as a deprecated alias of the flag newName, which
// must already be registered on fs; Add panics otherwise, as fs does for
// a name registered twice, since either is a mistake in the binary.
func Add(fs *flag.FlagSet, old, newName string) {
	f := fs.Lookup(newName)
	if f == nil {
		panic(fmt.Sprintf("flagalias: -%s is an alias of -%s, which is not registered", old, newName))
	}
	usage := "deprecated: use -" + newName
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		fs.Var(&boolValue{value{target: f.Value, newName: newName}}, old, usage)
		return
	}
	fs.Var(&value{target: f.Value, newName: newName}, old, usage)
}

// Used returns the aliases set on fs's command line, in the order of
// their names. Call it after fs.Parse.
func Used(fs *flag.FlagSet) []Alias {
	var used []Alias
	fs.Visit(func(f *flag.Flag) {
		switch v := f.Value.(type) {
		case *value:
			used = append(used, Alias{Old: f.Name, New: v.newName})
		case *boolValue:
			used = append(used, Alias{Old: f.Name, New: v.newName})
		}
	})
	return used
}

// Warn logs a warning for each alias set on fs's command line.
func Warn(fs *flag.FlagSet, log *slog.Logger) {
	for _, a := range Used(fs) {
		log.Warn("deprecated flag; it will be removed in a later release", "flag", "-"+a.Old, "use", "-"+a.New)
	}
}
