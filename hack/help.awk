# Prints make help: the targets whose rule line ends in "## text", under
# the group named by the last "##@ Group" line above them in their file.
# A group met in several files (the Makefile and mk/*.mk) is printed once,
# in the order the groups were first met.
# -v order="A|B|..." puts those groups first, in that order.
BEGIN {
	n = split(order, o, "|")
	for (i = 1; i <= n; i++) { seen[o[i]] = 1; order_[i] = o[i] }
}
FNR == 1 { group = "Other" }
/^##@ / { group = substr($0, 5); next }
/^[a-zA-Z0-9_%-]+( [a-zA-Z0-9_%-]+)*:.*## / {
	target = $0; sub(/:.*/, "", target)
	text = $0; sub(/^[^#]*## /, "", text)
	if (!(group in seen)) { seen[group] = 1; order_[++n] = group }
	lines[group] = lines[group] sprintf("  %-20s %s\n", target, text)
}
END {
	printf "Usage: make <target> [VAR=value]\n"
	for (i = 1; i <= n; i++)
		if (order_[i] in lines) printf "\n%s\n%s", order_[i], lines[order_[i]]
}
