//! The virtual shell against GNU bash and coreutils: a table of commands run over the same
//! files, with the output and exit status GNU prints (recorded from bash 5.2, coreutils 9.1,
//! grep 3.8, sed 4.9, findutils 4.9, diffutils 3.8 in the C locale). On Linux the table is also
//! replayed through the real bash to keep it honest. Then what only the virtual shell does:
//! confinement to the repository, `cd` persistence, limits, the caller-supplied git and Python,
//! and a parser fuzz.

use std::time::Duration;

use lilypad_repo::{RepoPath, Repository, VirtualRepo};
use lilypad_shell::{Baseline, LocalFuture, ProgramIo, PythonRunner, Shell, VirtualShell};

const FILES: &[(&str, &str)] = &[
    ("README.md", "# Demo\nA small project.\n"),
    ("notes.txt", "alpha\nbeta\ngamma foo\nbeta\nfoo bar baz\n"),
    ("nums.txt", "10\n9\n100\n-3\n9\n"),
    (
        "src/main.py",
        "import os\n\ndef main():\n    print(\"hello\")\n    return 0\n",
    ),
    (
        "src/util.py",
        "def helper(x):\n    return x * 2\n\n# TODO: more\n",
    ),
    ("src/pkg/__init__.py", ""),
    ("src/pkg/core.py", "class Core:\n    pass\n"),
    (
        "tests/test_main.py",
        "from src.main import main\n\ndef test_main():\n    assert main() == 0\n",
    ),
    (
        "data.csv",
        "name,age,city\nann,31,paris\nbob,25,rome\ncid,40,oslo\n",
    ),
    ("noeol.txt", "first\nlast"),
    (".hidden", "secret\n"),
    ("words.txt", "the cat\nthe dog\nThe end\ncatalog\n"),
];
const DIRS: &[&str] = &["empty"];

fn p(s: &str) -> RepoPath {
    RepoPath::new(s).unwrap()
}

fn fixture() -> VirtualRepo {
    let mut repo = VirtualRepo::new("/repo");
    for (path, text) in FILES {
        repo.write(&p(path), text.as_bytes()).unwrap();
    }
    for dir in DIRS {
        repo.create_dir_all(&p(dir)).unwrap();
    }
    repo
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `cmd` in a fresh shell over `repo`.
fn run_in(repo: &mut VirtualRepo, cmd: &str) -> (String, Option<i32>) {
    let out = VirtualShell::new().run(repo, cmd, TIMEOUT);
    (out.output, out.exit_code)
}

struct Case {
    cmd: &'static str,
    out: &'static str,
    status: i32,
}

const fn case(cmd: &'static str, out: &'static str, status: i32) -> Case {
    Case { cmd, out, status }
}

/// Every command against the fixture, with GNU's output and status.
#[rustfmt::skip]
const CASES: &[Case] = &[
    case(r##"echo hello world"##, r##"hello world
"##, 0),
    case(r##"echo -n no newline"##, r##"no newline"##, 0),
    case(r##"echo -e 'a\tb\nc'"##, r##"a	b
c
"##, 0),
    case(r##"echo "$HOME" '$HOME' $PWD"##, r##"/repo $HOME /repo
"##, 0),
    case(r##"printf '%s-%d|%5.2f|%-4s|%03d\n' ab 42 3.14159 x 7"##, r##"ab-42| 3.14|x   |007
"##, 0),
    case(r##"printf '%s\n' one two three"##, r##"one
two
three
"##, 0),
    case(r##"printf '%x %o %e %g\n' 255 8 1234.5 0.0001"##, r##"ff 10 1.234500e+03 0.0001
"##, 0),
    case(r##"pwd"##, r##"/repo
"##, 0),
    case(r##"cat notes.txt"##, r##"alpha
beta
gamma foo
beta
foo bar baz
"##, 0),
    case(r##"cat -n src/main.py"##, r##"     1	import os
     2	
     3	def main():
     4	    print("hello")
     5	    return 0
"##, 0),
    case(r##"cat noeol.txt README.md"##, r##"first
last# Demo
A small project.
"##, 0),
    case(r##"cat nope"##, r##"cat: nope: No such file or directory
"##, 1),
    case(r##"cat src"##, r##"cat: src: Is a directory
"##, 1),
    case(r##"head -n 2 notes.txt"##, r##"alpha
beta
"##, 0),
    case(r##"head -3 nums.txt"##, r##"10
9
100
"##, 0),
    case(r##"head -c 7 notes.txt"##, r##"alpha
b"##, 0),
    case(r##"head -n -2 notes.txt"##, r##"alpha
beta
gamma foo
"##, 0),
    case(r##"head -n 1 notes.txt nums.txt"##, r##"==> notes.txt <==
alpha

==> nums.txt <==
10
"##, 0),
    case(r##"tail -n 2 notes.txt"##, r##"beta
foo bar baz
"##, 0),
    case(r##"tail -n +4 notes.txt"##, r##"beta
foo bar baz
"##, 0),
    case(r##"tail -1 noeol.txt"##, r##"last"##, 0),
    case(r##"head nope"##, r##"head: cannot open 'nope' for reading: No such file or directory
"##, 1),
    case(r##"wc notes.txt"##, r##" 5  8 38 notes.txt
"##, 0),
    case(r##"wc -l notes.txt"##, r##"5 notes.txt
"##, 0),
    case(r##"wc -l notes.txt nums.txt"##, r##" 5 notes.txt
 5 nums.txt
10 total
"##, 0),
    case(r##"wc -w < notes.txt"##, r##"8
"##, 0),
    case(r##"cat notes.txt | wc -l"##, r##"5
"##, 0),
    case(r##"wc -c noeol.txt README.md"##, r##"10 noeol.txt
24 README.md
34 total
"##, 0),
    case(r##"grep beta notes.txt"##, r##"beta
beta
"##, 0),
    case(r##"grep -n foo notes.txt"##, r##"3:gamma foo
5:foo bar baz
"##, 0),
    case(r##"grep -c beta notes.txt"##, r##"2
"##, 0),
    case(r##"grep -i THE words.txt"##, r##"the cat
the dog
The end
"##, 0),
    case(r##"grep -v a notes.txt"##, r##""##, 1),
    case(r##"grep -w cat words.txt"##, r##"the cat
"##, 0),
    case(r##"grep -x beta notes.txt"##, r##"beta
beta
"##, 0),
    case(r##"grep -o 'ba.' notes.txt"##, r##"bar
baz
"##, 0),
    case(r##"grep -E 'alpha|gamma' notes.txt"##, r##"alpha
gamma foo
"##, 0),
    case(r##"grep -F 'a.b' notes.txt"##, r##""##, 1),
    case(r##"grep 'b\(et\)a' notes.txt"##, r##"beta
beta
"##, 0),
    case(r##"grep -n -A1 alpha notes.txt"##, r##"1:alpha
2-beta
"##, 0),
    case(r##"grep -B1 -n gamma notes.txt"##, r##"2-beta
3:gamma foo
"##, 0),
    case(r##"grep -C1 beta notes.txt"##, r##"alpha
beta
gamma foo
beta
foo bar baz
"##, 0),
    case(r##"grep -l main src/main.py src/util.py tests/test_main.py"##, r##"src/main.py
tests/test_main.py
"##, 0),
    case(r##"grep -L main src/main.py src/util.py"##, r##"src/util.py
"##, 0),
    case(r##"grep foo notes.txt nums.txt"##, r##"notes.txt:gamma foo
notes.txt:foo bar baz
"##, 0),
    case(r##"grep -h foo notes.txt README.md notes.txt"##, r##"gamma foo
foo bar baz
gamma foo
foo bar baz
"##, 0),
    case(r##"grep zzz notes.txt"##, r##""##, 1),
    case(r##"grep foo nope"##, r##"grep: nope: No such file or directory
"##, 2),
    case(r##"grep foo src"##, r##"grep: src: Is a directory
"##, 2),
    case(r##"grep -rn 'def ' src | sort"##, r##"src/main.py:3:def main():
src/util.py:1:def helper(x):
"##, 0),
    case(r##"grep -rn return . --include='*.py' | sort"##, r##"./src/main.py:5:    return 0
./src/util.py:2:    return x * 2
"##, 0),
    case(r##"grep -r TODO"##, r##"src/util.py:# TODO: more
"##, 0),
    case(r##"grep -rl import . | sort"##, r##"./src/main.py
./tests/test_main.py
"##, 0),
    case(r##"grep -c '' noeol.txt"##, r##"2
"##, 0),
    case(r##"grep -e alpha -e baz notes.txt"##, r##"alpha
foo bar baz
"##, 0),
    case(r##"grep -q beta notes.txt && echo yes"##, r##"yes
"##, 0),
    case(r##"grep -m1 beta notes.txt"##, r##"beta
"##, 0),
    case(r##"grep -n '^$' src/main.py"##, r##"2:
"##, 0),
    case(r##"grep -E '[0-9]{3}' nums.txt"##, r##"100
"##, 0),
    case(r##"grep '[[:upper:]]' words.txt"##, r##"The end
"##, 0),
    case(r##"grep -- -3 nums.txt"##, r##"-3
"##, 0),
    case(r##"find . -name '*.py' | sort"##, r##"./src/main.py
./src/pkg/__init__.py
./src/pkg/core.py
./src/util.py
./tests/test_main.py
"##, 0),
    case(r##"find src -type d | sort"##, r##"src
src/pkg
"##, 0),
    case(r##"find . -maxdepth 1 -type f | sort"##, r##"./.hidden
./README.md
./data.csv
./noeol.txt
./notes.txt
./nums.txt
./words.txt
"##, 0),
    case(r##"find . -path './src/*' -name '*.py' | sort"##, r##"./src/main.py
./src/pkg/__init__.py
./src/pkg/core.py
./src/util.py
"##, 0),
    case(r##"find src/ -name core.py"##, r##"src/pkg/core.py
"##, 0),
    case(r##"find . -type f -size +30c | sort"##, r##"./data.csv
./notes.txt
./src/main.py
./src/util.py
./tests/test_main.py
./words.txt
"##, 0),
    case(r##"find . -empty | sort"##, r##"./empty
./src/pkg/__init__.py
"##, 0),
    case(r##"find . -type f -name '*.py' -exec grep -l def {} + | sort"##, r##"./src/main.py
./src/util.py
./tests/test_main.py
"##, 0),
    case(r##"find src -name '*.py' -exec wc -l {} \; | sort"##, r##"0 src/pkg/__init__.py
2 src/pkg/core.py
4 src/util.py
5 src/main.py
"##, 0),
    case(r##"find . -name nothing"##, r##""##, 0),
    case(r##"find nope"##, r##"find: 'nope': No such file or directory
"##, 1),
    case(r##"find . -maxdepth 1 -name '*.md' -o -maxdepth 1 -name '*.csv' | sort"##, r##"./README.md
./data.csv
"##, 0),
    case(r##"find src -not -name '*.py' | sort"##, r##"src
src/pkg
"##, 0),
    case(r##"sed -n '2p' notes.txt"##, r##"beta
"##, 0),
    case(r##"sed -n '2,3p' notes.txt"##, r##"beta
gamma foo
"##, 0),
    case(r##"sed 's/a/A/g' notes.txt"##, r##"AlphA
betA
gAmmA foo
betA
foo bAr bAz
"##, 0),
    case(r##"sed 's/a/A/' notes.txt"##, r##"Alpha
betA
gAmma foo
betA
foo bAr baz
"##, 0),
    case(r##"sed -E 's/(b)(e)/\2\1/' notes.txt"##, r##"alpha
ebta
gamma foo
ebta
foo bar baz
"##, 0),
    case(r##"sed 's|/|_|g' <<< 'a/b/c'"##, r##"a_b_c
"##, 0),
    case(r##"sed '$d' notes.txt"##, r##"alpha
beta
gamma foo
beta
"##, 0),
    case(r##"sed '/beta/d' notes.txt"##, r##"alpha
gamma foo
foo bar baz
"##, 0),
    case(r##"sed 'y/abc/xyz/' notes.txt"##, r##"xlphx
yetx
gxmmx foo
yetx
foo yxr yxz
"##, 0),
    case(r##"sed -n '/gamma/,$p' notes.txt"##, r##"gamma foo
beta
foo bar baz
"##, 0),
    case(r##"sed '2i\inserted' nums.txt"##, r##"10
inserted
9
100
-3
9
"##, 0),
    case(r##"sed '1a appended' nums.txt"##, r##"10
appended
9
100
-3
9
"##, 0),
    case(r##"sed '3c changed' nums.txt"##, r##"10
9
changed
-3
9
"##, 0),
    case(r##"sed = noeol.txt"##, r##"1
first
2
last"##, 0),
    case(r##"sed -n '$=' notes.txt"##, r##"5
"##, 0),
    case(r##"sed 's/o/0/2' words.txt"##, r##"the cat
the dog
The end
catalog
"##, 0),
    case(r##"sed -e 's/a/1/' -e 's/b/2/' notes.txt"##, r##"1lpha
2et1
g1mma foo
2et1
foo 21r baz
"##, 0),
    case(r##"sed 's/\(.*\)/[\1]/' nums.txt"##, r##"[10]
[9]
[100]
[-3]
[9]
"##, 0),
    case(r##"sed 's/beta/&&/;s/alpha/x/' notes.txt"##, r##"x
betabeta
gamma foo
betabeta
foo bar baz
"##, 0),
    case(r##"sed '2q' notes.txt"##, r##"alpha
beta
"##, 0),
    case(r##"sed -n '1~2p' notes.txt"##, r##"alpha
gamma foo
foo bar baz
"##, 0),
    case(r##"sed -i 's/beta/BETA/' notes.txt && cat notes.txt"##, r##"alpha
BETA
gamma foo
BETA
foo bar baz
"##, 0),
    case(r##"sed -i.bak 's/10/ten/' nums.txt && cat nums.txt nums.txt.bak"##, r##"ten
9
ten0
-3
9
10
9
100
-3
9
"##, 0),
    case(r##"sed 's/x/y' notes.txt"##, r##"sed: -e expression #1, char 5: unterminated `s' command
"##, 1),
    case(r##"sed 'k' notes.txt"##, r##"sed: -e expression #1, char 1: unknown command: `k'
"##, 1),
    case(r##"sed -n 'p' nope"##, r##"sed: can't read nope: No such file or directory
"##, 2),
    case(r##"sort notes.txt"##, r##"alpha
beta
beta
foo bar baz
gamma foo
"##, 0),
    case(r##"sort -r notes.txt"##, r##"gamma foo
foo bar baz
beta
beta
alpha
"##, 0),
    case(r##"sort -n nums.txt"##, r##"-3
9
9
10
100
"##, 0),
    case(r##"sort -rn nums.txt"##, r##"100
10
9
9
-3
"##, 0),
    case(r##"sort -u notes.txt"##, r##"alpha
beta
foo bar baz
gamma foo
"##, 0),
    case(r##"sort -t, -k2 -n data.csv"##, r##"name,age,city
bob,25,rome
ann,31,paris
cid,40,oslo
"##, 0),
    case(r##"sort -t, -k3 data.csv"##, r##"name,age,city
cid,40,oslo
ann,31,paris
bob,25,rome
"##, 0),
    case(r##"sort words.txt"##, r##"The end
catalog
the cat
the dog
"##, 0),
    case(r##"sort -f words.txt"##, r##"catalog
the cat
the dog
The end
"##, 0),
    case(r##"uniq -c notes.txt"##, r##"      1 alpha
      1 beta
      1 gamma foo
      1 beta
      1 foo bar baz
"##, 0),
    case(r##"sort notes.txt | uniq -c"##, r##"      1 alpha
      2 beta
      1 foo bar baz
      1 gamma foo
"##, 0),
    case(r##"sort notes.txt | uniq -d"##, r##"beta
"##, 0),
    case(r##"sort notes.txt | uniq -u"##, r##"alpha
foo bar baz
gamma foo
"##, 0),
    case(r##"tr a-z A-Z < notes.txt"##, r##"ALPHA
BETA
GAMMA FOO
BETA
FOO BAR BAZ
"##, 0),
    case(r##"tr -d 'a' < notes.txt"##, r##"lph
bet
gmm foo
bet
foo br bz
"##, 0),
    case(r##"echo 'a   b    c' | tr -s ' '"##, r##"a b c
"##, 0),
    case(r##"echo 'hello 123 world' | tr -cd '0-9\n'"##, r##"123
"##, 0),
    case(r##"echo hello | tr '[:lower:]' '[:upper:]'"##, r##"HELLO
"##, 0),
    case(r##"tr"##, r##"tr: missing operand
Try 'tr --help' for more information.
"##, 1),
    case(r##"cut -d, -f1,3 data.csv"##, r##"name,city
ann,paris
bob,rome
cid,oslo
"##, 0),
    case(r##"cut -c1-3 notes.txt"##, r##"alp
bet
gam
bet
foo
"##, 0),
    case(r##"cut -d' ' -f2 words.txt"##, r##"cat
dog
end
catalog
"##, 0),
    case(r##"cut -f2 -d, data.csv | sort -n"##, r##"age
25
31
40
"##, 0),
    case(r##"diff notes.txt nums.txt"##, r##"1,5c1,5
< alpha
< beta
< gamma foo
< beta
< foo bar baz
---
> 10
> 9
> 100
> -3
> 9
"##, 1),
    case(r##"diff -u notes.txt nums.txt"##, r##"--- notes.txt
+++ nums.txt
@@ -1,5 +1,5 @@
-alpha
-beta
-gamma foo
-beta
-foo bar baz
+10
+9
+100
+-3
+9
"##, 1),
    case(r##"diff notes.txt notes.txt && echo same"##, r##"same
"##, 0),
    case(r##"diff noeol.txt README.md"##, r##"1,2c1,2
< first
< last
\ No newline at end of file
---
> # Demo
> A small project.
"##, 1),
    case(r##"diff nope notes.txt"##, r##"diff: nope: No such file or directory
"##, 2),
    case(r##"ls"##, r##"README.md
data.csv
empty
noeol.txt
notes.txt
nums.txt
src
tests
words.txt
"##, 0),
    case(r##"ls -a"##, r##".
..
.hidden
README.md
data.csv
empty
noeol.txt
notes.txt
nums.txt
src
tests
words.txt
"##, 0),
    case(r##"ls -A"##, r##".hidden
README.md
data.csv
empty
noeol.txt
notes.txt
nums.txt
src
tests
words.txt
"##, 0),
    case(r##"ls src"##, r##"main.py
pkg
util.py
"##, 0),
    case(r##"ls src tests"##, r##"src:
main.py
pkg
util.py

tests:
test_main.py
"##, 0),
    case(r##"ls -1 src/pkg"##, r##"__init__.py
core.py
"##, 0),
    case(r##"ls nope"##, r##"ls: cannot access 'nope': No such file or directory
"##, 2),
    case(r##"ls -d src"##, r##"src
"##, 0),
    case(r##"ls -F src"##, r##"main.py
pkg/
util.py
"##, 0),
    case(r##"ls README.md notes.txt src"##, r##"README.md
notes.txt

src:
main.py
pkg
util.py
"##, 0),
    case(r##"ls -R src"##, r##"src:
main.py
pkg
util.py

src/pkg:
__init__.py
core.py
"##, 0),
    case(r##"ls *.txt"##, r##"noeol.txt
notes.txt
nums.txt
words.txt
"##, 0),
    case(r##"ls src/*.py"##, r##"src/main.py
src/util.py
"##, 0),
    case(r##"ls -r"##, r##"words.txt
tests
src
nums.txt
notes.txt
noeol.txt
empty
data.csv
README.md
"##, 0),
    case(r##"mkdir newdir && ls -d newdir"##, r##"newdir
"##, 0),
    case(r##"mkdir src"##, r##"mkdir: cannot create directory 'src': File exists
"##, 1),
    case(r##"mkdir -p a/b/c && find a | sort"##, r##"a
a/b
a/b/c
"##, 0),
    case(r##"mkdir x/y"##, r##"mkdir: cannot create directory 'x/y': No such file or directory
"##, 1),
    case(r##"rm notes.txt && ls"##, r##"README.md
data.csv
empty
noeol.txt
nums.txt
src
tests
words.txt
"##, 0),
    case(r##"rm src"##, r##"rm: cannot remove 'src': Is a directory
"##, 1),
    case(r##"rm -r src && ls"##, r##"README.md
data.csv
empty
noeol.txt
notes.txt
nums.txt
tests
words.txt
"##, 0),
    case(r##"rm nope"##, r##"rm: cannot remove 'nope': No such file or directory
"##, 1),
    case(r##"rm -f nope; echo $?"##, r##"0
"##, 0),
    case(r##"rm -rf empty src && ls"##, r##"README.md
data.csv
noeol.txt
notes.txt
nums.txt
tests
words.txt
"##, 0),
    case(r##"mv notes.txt renamed.txt && ls"##, r##"README.md
data.csv
empty
noeol.txt
nums.txt
renamed.txt
src
tests
words.txt
"##, 0),
    case(r##"mv notes.txt src && ls src"##, r##"main.py
notes.txt
pkg
util.py
"##, 0),
    case(r##"mv nope x"##, r##"mv: cannot stat 'nope': No such file or directory
"##, 1),
    case(r##"mv notes.txt nums.txt src/pkg/ && ls src/pkg"##, r##"__init__.py
core.py
notes.txt
nums.txt
"##, 0),
    case(r##"cp notes.txt copy.txt && cat copy.txt"##, r##"alpha
beta
gamma foo
beta
foo bar baz
"##, 0),
    case(r##"cp src dest"##, r##"cp: -r not specified; omitting directory 'src'
"##, 1),
    case(r##"cp -r src dest && find dest | sort"##, r##"dest
dest/main.py
dest/pkg
dest/pkg/__init__.py
dest/pkg/core.py
dest/util.py
"##, 0),
    case(r##"cp notes.txt nope/x"##, r##"cp: cannot create regular file 'nope/x': No such file or directory
"##, 1),
    case(r##"touch new.txt && ls new.txt && wc -c new.txt"##, r##"new.txt
0 new.txt
"##, 0),
    case(r##"touch nodir/x"##, r##"touch: cannot touch 'nodir/x': No such file or directory
"##, 1),
    case(r##"basename /repo/src/main.py"##, r##"main.py
"##, 0),
    case(r##"basename src/main.py .py"##, r##"main
"##, 0),
    case(r##"dirname src/pkg/core.py"##, r##"src/pkg
"##, 0),
    case(r##"dirname file"##, r##".
"##, 0),
    case(r##"echo a | cat - notes.txt"##, r##"a
alpha
beta
gamma foo
beta
foo bar baz
"##, 0),
    case(r##"echo one; echo two"##, r##"one
two
"##, 0),
    case(r##"true && echo yes || echo no"##, r##"yes
"##, 0),
    case(r##"false && echo yes || echo no"##, r##"no
"##, 0),
    case(r##"false; echo $?"##, r##"1
"##, 0),
    case(r##"nosuchcmd; echo $?"##, r##"bash: nosuchcmd: command not found
127
"##, 0),
    case(r##"echo out > out.txt; cat out.txt"##, r##"out
"##, 0),
    case(r##"echo one > f; echo two >> f; cat f"##, r##"one
two
"##, 0),
    case(r##"cat < notes.txt | head -1"##, r##"alpha
"##, 0),
    case(r##"cat nope 2>/dev/null; echo $?"##, r##"1
"##, 0),
    case(r##"cat nope 2>&1 | tr a-z A-Z"##, r##"CAT: NOPE: NO SUCH FILE OR DIRECTORY
"##, 0),
    case(r##"cat notes.txt nope > out.txt 2>&1; cat out.txt"##, r##"alpha
beta
gamma foo
beta
foo bar baz
cat: nope: No such file or directory
"##, 0),
    case(r##"ls nope > /dev/null 2>&1 || echo failed"##, r##"failed
"##, 0),
    case(r##"echo err >&2"##, r##"err
"##, 0),
    case(r##"{ echo a; echo b; } > g.txt; cat g.txt"##, r##"a
b
"##, 0),
    case(r##"(cd src && pwd); pwd"##, r##"/repo/src
/repo
"##, 0),
    case(r##"cd src && ls && cd .. && pwd"##, r##"main.py
pkg
util.py
/repo
"##, 0),
    case(r##"X=5; echo "x is $X ${X}0""##, r##"x is 5 50
"##, 0),
    case(r##"X=hello; echo ${#X} ${X:-d} ${Y:-default}"##, r##"5 hello default
"##, 0),
    case(r##"F=src/main.py; echo ${F%.py} ${F#*/} ${F##*/}"##, r##"src/main main.py main.py
"##, 0),
    case(r##"echo $((3 + 4 * 2))"##, r##"11
"##, 0),
    case(r##"i=0; while [ $i -lt 3 ]; do echo $i; i=$((i+1)); done"##, r##"0
1
2
"##, 0),
    case(r##"for f in src/*.py; do echo "file: $f"; done"##, r##"file: src/main.py
file: src/util.py
"##, 0),
    case(r##"for x in a b c; do echo $x; done | sort -r"##, r##"c
b
a
"##, 0),
    case(r##"if [ -f notes.txt ]; then echo file; else echo no; fi"##, r##"file
"##, 0),
    case(r##"if [ -d nope ]; then echo dir; elif [ -e src ]; then echo src; fi"##, r##"src
"##, 0),
    case(r##"[ "$(cat noeol.txt | head -1)" = first ] && echo match"##, r##"match
"##, 0),
    case(r##"echo $(echo nested $(echo deep))"##, r##"nested deep
"##, 0),
    case(r##"echo `echo backtick`"##, r##"backtick
"##, 0),
    case(r##"echo *.csv"##, r##"data.csv
"##, 0),
    case(r##"echo 'single $HOME' "double \$HOME \"q\"""##, r##"single $HOME double $HOME "q"
"##, 0),
    case(r##"echo a\ b c\\d"##, r##"a b c\d
"##, 0),
    case(r##"echo ~"##, r##"/repo
"##, 0),
    case(r##"echo nomatch*.zzz"##, r##"nomatch*.zzz
"##, 0),
    case(r##"cat <<EOF
home is $HOME
EOF"##, r##"home is /repo
"##, 0),
    case(r##"cat <<'EOF'
literal $HOME
EOF"##, r##"literal $HOME
"##, 0),
    case(r##"cat > made.py <<'EOF'
def f():
    return "$x"
EOF
cat made.py"##, r##"def f():
    return "$x"
"##, 0),
    case(r##"cat <<-EOF | sort
	z
	y
	EOF"##, r##"y
z
"##, 0),
    case(r##"x=1; test $x -eq 1 && echo one"##, r##"one
"##, 0),
    case(r##"test -z "" && echo empty"##, r##"empty
"##, 0),
    case(r##"[ abc != abd ] && echo differ"##, r##"differ
"##, 0),
    case(r##"seq 3"##, r##"1
2
3
"##, 0),
    case(r##"seq 2 2 8"##, r##"2
4
6
8
"##, 0),
    case(r##"seq -s, 1 4"##, r##"1,2,3,4
"##, 0),
    case(r##"export A=1; echo $A"##, r##"1
"##, 0),
    case(r##"echo a b c | xargs -n1 echo item"##, r##"item a
item b
item c
"##, 0),
    case(r##"find src -name '*.py' | sort | xargs grep -c def"##, r##"src/main.py:1
src/pkg/__init__.py:0
src/pkg/core.py:0
src/util.py:1
"##, 0),
    case(r##"printf 'a\nb\n' | while read line; do echo "got $line"; done"##, r##"got a
got b
"##, 0),
    case(r##"set -e; false; echo unreachable"##, r##""##, 1),
    case(r##"set -o pipefail; false | true; echo $?"##, r##"1
"##, 0),
    case(r##"false | true; echo $?"##, r##"0
"##, 0),
    case(r##"! false && echo negated"##, r##"negated
"##, 0),
    case(r##"echo a && { echo b; false; } || echo c"##, r##"a
b
c
"##, 0),
    case(r##"exit 3"##, r##""##, 3),
    case(r##"echo before; exit 0; echo after"##, r##"before
"##, 0),
    case(r##"which ls cat"##, r##"/usr/bin/ls
/usr/bin/cat
"##, 0),
    case(r##"which nosuch; echo $?"##, r##"1
"##, 0),
    case(r##"type cd"##, r##"cd is a shell builtin
"##, 0),
    case(r##"grep -rn foo --include='*.txt' . | sort"##, r##"./notes.txt:3:gamma foo
./notes.txt:5:foo bar baz
"##, 0),
    case(r##"echo "a b" | sed 's/ /\n/'"##, r##"a
b
"##, 0),
    case(r##"sed -n '/^def/p' src/main.py src/util.py"##, r##"def main():
def helper(x):
"##, 0),
    case(r##"head -n 2 src/*.py"##, r##"==> src/main.py <==
import os


==> src/util.py <==
def helper(x):
    return x * 2
"##, 0),
    case(r##"grep -c def src/*.py"##, r##"src/main.py:1
src/util.py:1
"##, 0),
    case(r##"printf '%5s|%-5s|\n' a b"##, r##"    a|b    |
"##, 0),
    case(r##"sort -k2 words.txt"##, r##"catalog
the cat
the dog
The end
"##, 0),
    case(r##"wc -l src/*.py"##, r##"  5 src/main.py
  4 src/util.py
  9 total
"##, 0),
    case(r##"tail -n 3 src/main.py"##, r##"def main():
    print("hello")
    return 0
"##, 0),
    case(r##"ls src | wc -l"##, r##"3
"##, 0),
    case(r##"cd src; cat ../notes.txt | head -1"##, r##"alpha
"##, 0),
    case(r##"cd empty && ls && cd - && pwd"##, r##"/repo
/repo
"##, 0),
    case(r##"cat notes.txt | grep -n beta | cut -d: -f1"##, r##"2
4
"##, 0),
    case(r##"mv src/main.py src/app.py && ls src"##, r##"app.py
pkg
util.py
"##, 0),
    case(r##"sed -i 's/return 0/return 1/' src/main.py && grep -n return src/main.py"##, r##"5:    return 1
"##, 0),
    case(r##"echo x | tee t.txt; cat t.txt"##, r##"x
x
"##, 0),
    case(r##"find . -name '*.py' | sort | xargs wc -l"##, r##"  5 ./src/main.py
  0 ./src/pkg/__init__.py
  2 ./src/pkg/core.py
  4 ./src/util.py
  4 ./tests/test_main.py
 15 total
"##, 0),
    case(r##"echo '$(echo hi)'"##, r##"$(echo hi)
"##, 0),
    case(r##"echo "$(printf 'a\nb')""##, r##"a
b
"##, 0),
    case(r##"for i in $(seq 1 3); do echo -n "$i "; done; echo"##, r##"1 2 3 
"##, 0),
    case(r##"diff -u src/main.py src/util.py"##, r##"--- src/main.py
+++ src/util.py
@@ -1,5 +1,4 @@
-import os
+def helper(x):
+    return x * 2
 
-def main():
-    print("hello")
-    return 0
+# TODO: more
"##, 1),
    case(r##"cat src/*.py | wc -l"##, r##"9
"##, 0),
    case(r##"realpath src/../notes.txt"##, r##"/repo/notes.txt
"##, 0),
    case(r##"grep -rn def --include='*.py' src tests | sort"##, r##"src/main.py:3:def main():
src/util.py:1:def helper(x):
tests/test_main.py:3:def test_main():
"##, 0),
    case(r##"grep -rn helper src/ | sort"##, r##"src/util.py:1:def helper(x):
"##, 0),
    case(r##"grep -r --exclude-dir=pkg class src | sort"##, r##""##, 0),
    case(r##"sed -n '3,$p' src/main.py"##, r##"def main():
    print("hello")
    return 0
"##, 0),
    case(r##"sort nums.txt | uniq"##, r##"-3
10
100
9
"##, 0),
    case(r##"ls -1 | head -3"##, r##"README.md
data.csv
empty
"##, 0),
    case(r##"cut -d, -f2 data.csv | tail -n +2 | sort -n | head -1"##, r##"25
"##, 0),
    case(r##"find . -type f | wc -l"##, r##"12
"##, 0),
    case(r##"cp -r src/pkg newpkg && ls newpkg"##, r##"__init__.py
core.py
"##, 0),
    case(r##"mkdir -p out && echo x > out/y.txt && cat out/y.txt"##, r##"x
"##, 0),
    case(r##"echo hi > empty/x; ls empty"##, r##"x
"##, 0),
    case(r##"rm -r empty; ls"##, r##"README.md
data.csv
noeol.txt
notes.txt
nums.txt
src
tests
words.txt
"##, 0),
    case(r##"test -f src/main.py && echo yes"##, r##"yes
"##, 0),
    case(r##"[ -s src/pkg/__init__.py ] || echo empty"##, r##"empty
"##, 0),
    case(r##"cd nope"##, r##"bash: cd: nope: No such file or directory
"##, 1),
    case(r##"cd notes.txt"##, r##"bash: cd: notes.txt: Not a directory
"##, 1),
    case(r##"ls -z"##, r##"ls: invalid option -- 'z'
Try 'ls --help' for more information.
"##, 2),
    case(r##"grep"##, r##"Usage: grep [OPTION]... PATTERNS [FILE]...
Try 'grep --help' for more information.
"##, 2),
    case(r##"head -n x notes.txt"##, r##"head: invalid number of lines: 'x'
"##, 1),
    case(r##"wc nope notes.txt"##, r##"wc: nope: No such file or directory
 5  8 38 notes.txt
 5  8 38 total
"##, 1),
    case(r##"echo hi > nodir/file"##, r##"bash: nodir/file: No such file or directory
"##, 1),
    case(r##"cat notes.txt | sed -n 2p | tr a-z A-Z"##, r##"BETA
"##, 0),
    case(r##"echo $((10 / 3)) $((10 % 3)) $((2 ** 8)) $((-5 + 2))"##, r##"3 1 256 -3
"##, 0),
    case(r##"n=3; n=$((n * 2)); echo $n"##, r##"6
"##, 0),
    case(r##"A=a B=b; echo "$A$B" "${A}_$B""##, r##"ab a_b
"##, 0),
    case(r##"echo "tab	inside" | cut -f2"##, r##"inside
"##, 0),
    case(r##"printf '%s=%s\n' a 1 b 2"##, r##"a=1
b=2
"##, 0),
    case(r##"IFS=: ; echo a:b"##, r##"a:b
"##, 0),
    case(r##"echo one two | { read a b; echo "$b $a"; }"##, r##"two one
"##, 0),
    case(r##"echo "x y z" | while read -r first rest; do echo "$first|$rest"; done"##, r##"x|y z
"##, 0),
    case(r##"for f in *.txt; do wc -l < "$f"; done"##, r##"1
5
5
4
"##, 0),
    case(r##"echo a > f1; cat f1 f1 > f2; wc -l f2"##, r##"2 f2
"##, 0),
    case(r##"grep -n "" noeol.txt"##, r##"1:first
2:last
"##, 0),
    case(r##"sed 's/$/!/' noeol.txt"##, r##"first!
last!"##, 0),
    case(r##"tail -c 4 noeol.txt"##, r##"last"##, 0),
    case(r##"sort -k1,1 -t, data.csv"##, r##"ann,31,paris
bob,25,rome
cid,40,oslo
name,age,city
"##, 0),
    case(r##"uniq -c words.txt"##, r##"      1 the cat
      1 the dog
      1 The end
      1 catalog
"##, 0),
    case(r##"grep -io 'the' words.txt"##, r##"the
the
The
"##, 0),
    case(r##"sed -n '/cat/{p;=}' words.txt"##, r##"the cat
1
catalog
4
"##, 0),
    case(r##"sed '/^$/d' src/main.py"##, r##"import os
def main():
    print("hello")
    return 0
"##, 0),
    case(r##"sed -n 's/def \(.*\)(.*/\1/p' src/*.py"##, r##"main
helper
"##, 0),
    case(r##"find . -name '*.py' -not -path './tests/*' | sort"##, r##"./src/main.py
./src/pkg/__init__.py
./src/pkg/core.py
./src/util.py
"##, 0),
    case(r##"find . -maxdepth 2 -type d | sort"##, r##".
./empty
./src
./src/pkg
./tests
"##, 0),
    case(r##"find . -iname 'README*'"##, r##"./README.md
"##, 0),
    case(r##"ls -a empty"##, r##".
..
"##, 0),
    case(r##"cat -n noeol.txt"##, r##"     1	first
     2	last"##, 0),
    case(r##"basename -s .py src/main.py src/util.py"##, r##"main
util
"##, 0),
    case(r##"grep -w -c the words.txt"##, r##"2
"##, 0),
    case(r##"echo "a,b,c" | tr ',' '\n' | sort -r"##, r##"c
b
a
"##, 0),
    case(r##"echo abc | sed 's/b*/X/g'"##, r##"XaXcX
"##, 0),
    case(r##"echo hello | sed 's/l/L/2'"##, r##"helLo
"##, 0),
    case(r##"echo {a,b}{1,2} file{,.bak} x{}y '{q,r}' {solo}"##, r##"a1 a2 b1 b2 file file.bak x{}y {q,r} {solo}
"##, 0),
    case(r##"echo {1..5} {05..10..2} {e..a}"##, r##"1 2 3 4 5 05 07 09 e d c b a
"##, 0),
    case(r##"mkdir -p d/{x,y} && ls d"##, r##"x
y
"##, 0),
    case(r##"echo $'a\tb\x41\n' | cat -A"##, r##"a^IbA$
$
"##, 0),
    case(r##"[[ -f notes.txt && -d src ]] && echo both"##, r##"both
"##, 0),
    case(r##"[[ abc == a* ]] && echo glob; [[ abc == "b*" ]] || echo noglob"##, r##"glob
noglob
"##, 0),
    case(r##"[[ abc =~ ^a.c$ ]] && echo re"##, r##"re
"##, 0),
    case(r##"[[ -z "" || -n "" ]] && echo or"##, r##"or
"##, 0),
    case(r##"timeout 5 echo hi"##, r##"hi
"##, 0),
    case(r##"less notes.txt | head -1"##, r##"alpha
"##, 0),
    case(r##"seq -w 8 10"##, r##"08
09
10
"##, 0),
    case(r##"sed ':a;N;$!ba;s/\n/,/g' nums.txt"##, r##"10,9,100,-3,9
"##, 0),
    case(r##"printf 'a\tb\n' | sed -n l"##, r##"a\tb$
"##, 0),
    case(r##"grep -m1 -A1 beta notes.txt"##, r##"beta
gamma foo
"##, 0),
    case(r##"sort -t' ' -k2,2 words.txt"##, r##"catalog
the cat
the dog
The end
"##, 0),
    case(r##"ls src/*.py | xargs -I{} echo "<{}>""##, r##"<src/main.py>
<src/util.py>
"##, 0),
    case(r##"printf '%s\0' 'a b' c | xargs -0 echo"##, r##"a b c
"##, 0),
    case(r##"head -n 3 src/main.py | tail -n 1"##, r##"def main():
"##, 0),
    case(r##"wc -l < /dev/null; cat /dev/null; echo hi > /dev/null"##, r##"0
"##, 0),
    case(r##"tail -n 0 notes.txt"##, r##""##, 0),
    case(r##"grep -c . src/main.py"##, r##"4
"##, 0),
    case(r##"cd src && echo $PWD && cd .. && echo $OLDPWD"##, r##"/repo/src
/repo/src
"##, 0),
    case(r##"unset X; echo ${X-unset} ${X:+set}"##, r##"unset
"##, 0),
    case(r##"echo $HOME/x ~/y"##, r##"/repo/x /repo/y
"##, 0),
    case(r##"echo "a  b" | cut -d' ' -f1-"##, r##"a  b
"##, 0),
    case(r##"grep -rn --include='*.py' -e 'import' -e 'class' . | sort"##, r##"./src/main.py:1:import os
./src/pkg/core.py:1:class Core:
./tests/test_main.py:1:from src.main import main
"##, 0),
    case(r##"find . -name '*.py' -newer nothing"##, r##"find: 'nothing': No such file or directory
"##, 1),
    case(r##"sed -n '2{p;q}' notes.txt"##, r##"beta
"##, 0),
    case(r##"sed '1!G;h;$!d' nums.txt"##, r##"9
-3
100
9
10
"##, 0),
    case(r##"echo 'a.b.c' | cut -d. -f2- --output-delimiter=_"##, r##"b_c
"##, 0),
    case(r##"echo abc | rev"##, r##"cba
"##, 0),
    case(r##"echo '  a b  ' | { read; echo "[$REPLY]"; read x; echo "[$x]"; }"##, r##"[  a b  ]
[]
"##, 0),
    case(r##"printf ' 1  2 3 \n' | { read -r a b; echo "[$a|$b]"; }"##, r##"[1|2 3]
"##, 0),
    case(r##"echo 'a\tb' | { read x; echo "$x"; }"##, r##"atb
"##, 0),
    case(r##"ls -F"##, r##"README.md
data.csv
empty/
noeol.txt
notes.txt
nums.txt
src/
tests/
words.txt
"##, 0),
    case(r##"printf '  lead  \n' | while IFS= read -r line; do echo "[$line]"; done"##, r##"[  lead  ]
"##, 0),
    case(r##"IFS=, read -r a b c <<< "1,2,3,4"; echo "$a|$b|$c""##, r##"1|2|3,4
"##, 0),
    case(r##"IFS=, read -r a b <<< "1,2,"; echo "$a|$b""##, r##"1|2
"##, 0),
    case(r##"IFS=, read -r a b <<< "1,2,3,"; echo "[$b]"; IFS=', ' read -r a b <<< "1, 2 ,"; echo "[$b]""##, r##"[2,3,]
[2]
"##, 0),
    case(r##"line='a,,b'; IFS=,; for f in $line; do echo "<$f>"; done"##, r##"<a>
<>
<b>
"##, 0),
    case(r##"x=' a  b '; for w in $x; do echo "<$w>"; done"##, r##"<a>
<b>
"##, 0),
    case(r##"IFS=:; set -- ; p=/a:/b; for d in $p; do echo $d; done"##, r##"/a
/b
"##, 0),
    case(r##"ls -p src"##, r##"main.py
pkg/
util.py
"##, 0),
    case(r##"sort -n -k2 -t, data.csv | head -2"##, r##"name,age,city
bob,25,rome
"##, 0),
];

#[test]
fn commands_match_gnu() {
    let mut failures = Vec::new();
    for c in CASES {
        let mut repo = fixture();
        let (out, status) = run_in(&mut repo, c.cmd);
        if out != c.out || status != Some(c.status) {
            failures.push(format!(
                "$ {}\n--- expected (status {})\n{}--- got (status {:?})\n{}",
                c.cmd, c.status, c.out, status, out
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

/// Replays the table through the real bash in a folder holding the same files, so the
/// recorded expectations stay GNU's. Paths are shown as `/repo`, `bash: line N:` prefixes and
/// diff timestamps are dropped (the virtual shell prints neither).
#[cfg(target_os = "linux")]
#[test]
fn table_matches_real_bash() {
    use std::process::{Command, Stdio};

    let line_prefix = regex::Regex::new(r"bash: line \d+: ").unwrap();
    let stamp =
        regex::Regex::new(r"(?m)^((?:---|\+\+\+) \S+)\t\d{4}-\d\d-\d\d [0-9:.]+ [+-]\d{4}$")
            .unwrap();
    let mut failures = Vec::new();
    for c in CASES {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for (path, text) in FILES {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        for d in DIRS {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("exec 2>&1\n{}", c.cmd))
            .current_dir(&root)
            .env_clear()
            .env("LC_ALL", "C")
            .env("HOME", &root)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::null())
            .output()
            .expect("bash runs");
        let text = String::from_utf8_lossy(&out.stdout).replace(root.to_str().unwrap(), "/repo");
        let text = line_prefix.replace_all(&text, "bash: ");
        let text = stamp.replace_all(&text, "$1");
        if text != c.out || out.status.code() != Some(c.status) {
            failures.push(format!(
                "$ {}\n--- recorded\n{}--- real bash ({:?})\n{}",
                c.cmd,
                c.out,
                out.status.code(),
                text
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} recorded cases differ from this machine's GNU tools:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn ls_long_format() {
    let mut repo = fixture();
    let (out, status) = run_in(&mut repo, "ls -l; ls -la src/pkg; ls -lh README.md");
    assert_eq!(status, Some(0));
    assert_eq!(
        out,
        "total 36\n\
         -rw-r--r-- 1 user user   24 Jan  1 00:00 README.md\n\
         -rw-r--r-- 1 user user   51 Jan  1 00:00 data.csv\n\
         drwxr-xr-x 2 user user 4096 Jan  1 00:00 empty\n\
         -rw-r--r-- 1 user user   10 Jan  1 00:00 noeol.txt\n\
         -rw-r--r-- 1 user user   38 Jan  1 00:00 notes.txt\n\
         -rw-r--r-- 1 user user   14 Jan  1 00:00 nums.txt\n\
         drwxr-xr-x 3 user user 4096 Jan  1 00:00 src\n\
         drwxr-xr-x 2 user user 4096 Jan  1 00:00 tests\n\
         -rw-r--r-- 1 user user   32 Jan  1 00:00 words.txt\n\
         total 12\n\
         drwxr-xr-x 2 user user 4096 Jan  1 00:00 .\n\
         drwxr-xr-x 3 user user 4096 Jan  1 00:00 ..\n\
         -rw-r--r-- 1 user user    0 Jan  1 00:00 __init__.py\n\
         -rw-r--r-- 1 user user   21 Jan  1 00:00 core.py\n\
         -rw-r--r-- 1 user user 24 Jan  1 00:00 README.md\n"
    );
}

#[test]
fn cd_persists_between_runs() {
    let mut repo = fixture();
    let mut sh = VirtualShell::new();
    let run = |sh: &mut VirtualShell, repo: &mut VirtualRepo, cmd: &str| {
        sh.run(repo, cmd, TIMEOUT).output
    };
    assert_eq!(run(&mut sh, &mut repo, "cd src/pkg"), "");
    assert_eq!(sh.cwd(), p("src/pkg"));
    assert_eq!(
        run(&mut sh, &mut repo, "pwd; cat core.py | head -1"),
        "/repo/src/pkg\nclass Core:\n"
    );
    assert_eq!(
        run(&mut sh, &mut repo, "cd ..; ls"),
        "main.py\npkg\nutil.py\n"
    );
    // A subshell's or a pipeline stage's `cd` stays inside it.
    assert_eq!(
        run(&mut sh, &mut repo, "(cd /repo/tests); cd /repo | true; pwd"),
        "/repo/src\n"
    );
    assert_eq!(
        run(&mut sh, &mut repo, "cd nope"),
        "bash: cd: nope: No such file or directory\n"
    );
    assert_eq!(sh.cwd(), p("src"));
    assert_eq!(
        run(&mut sh, &mut repo, "cd; pwd; cd -"),
        "/repo\n/repo/src\n"
    );
    assert_eq!(sh.cwd(), p("src"));
    // Variables start over each run, as with a fresh `bash -c`.
    assert_eq!(
        run(&mut sh, &mut repo, "export GREETING=hi; echo $GREETING"),
        "hi\n"
    );
    assert_eq!(run(&mut sh, &mut repo, "echo \"[$GREETING]\""), "[]\n");
    // A working folder removed in the meantime falls back to the root.
    run(&mut sh, &mut repo, "cd pkg");
    repo.remove(&p("src")).unwrap();
    assert_eq!(run(&mut sh, &mut repo, "pwd"), "/repo\n");
    assert_eq!(sh.cwd(), RepoPath::root());
}

#[test]
fn nothing_outside_the_repository_is_reachable() {
    let before = fixture().snapshot().unwrap();
    let cases: &[(&str, &str, i32)] = &[
        (
            "cat /etc/passwd",
            "cat: /etc/passwd: Permission denied\n",
            1,
        ),
        (
            "cat ../../etc/passwd",
            "cat: ../../etc/passwd: Permission denied\n",
            1,
        ),
        ("cd .. && pwd", "bash: cd: ..: Permission denied\n", 1),
        ("cd /", "bash: cd: /: Permission denied\n", 1),
        ("ls ../", "ls: cannot access '../': Permission denied\n", 2),
        ("echo x > /tmp/f", "bash: /tmp/f: Permission denied\n", 1),
        (
            "echo x >> ../f; echo $?",
            "bash: ../f: Permission denied\n1\n",
            0,
        ),
        (
            "cat < /etc/hosts",
            "bash: /etc/hosts: Permission denied\n",
            1,
        ),
        (
            "cp notes.txt /tmp/x",
            "cp: cannot create regular file '/tmp/x': Permission denied\n",
            1,
        ),
        (
            "cp /etc/passwd .",
            "cp: cannot stat '/etc/passwd': Permission denied\n",
            1,
        ),
        (
            "mv notes.txt ../x",
            "mv: cannot move 'notes.txt' to '../x': Permission denied\n",
            1,
        ),
        ("rm -rf /", "rm: cannot remove '/': Permission denied\n", 1),
        (
            "rm -rf /repo",
            "rm: it is dangerous to operate recursively on '/repo'\nrm: use --no-preserve-root to override this failsafe\n",
            1,
        ),
        (
            "rm -rf .",
            "rm: refusing to remove '.' or '..' directory: skipping '.'\n",
            1,
        ),
        ("find / -name passwd", "find: '/': Permission denied\n", 1),
        ("grep -r root /etc", "grep: /etc: Permission denied\n", 2),
        (
            "mkdir /tmp/x",
            "mkdir: cannot create directory '/tmp/x': Permission denied\n",
            1,
        ),
        (
            "touch ../x",
            "touch: cannot touch '../x': Permission denied\n",
            1,
        ),
        (
            "source /etc/profile",
            "bash: /etc/profile: Permission denied\n",
            1,
        ),
        (
            "sed -i s/a/b/ /etc/passwd",
            "sed: can't read /etc/passwd: Permission denied\n",
            2,
        ),
        (
            "tee /tmp/x < notes.txt > /dev/null",
            "tee: /tmp/x: Permission denied\n",
            1,
        ),
        (
            "ls /repo/../..",
            "ls: cannot access '/repo/../..': Permission denied\n",
            2,
        ),
        ("echo /*", "/*\n", 0),
        ("ln -s /etc x", "bash: ln: command not found\n", 127),
    ];
    for (cmd, want, status) in cases {
        let mut repo = fixture();
        let (out, code) = run_in(&mut repo, cmd);
        assert_eq!((out.as_str(), code), (*want, Some(*status)), "{cmd}");
        assert_eq!(
            repo.snapshot().unwrap(),
            before,
            "{cmd} changed the repository"
        );
    }
}

#[test]
fn heredoc_writes_the_file_verbatim() {
    let mut repo = fixture();
    let script = "mkdir -p pkg && cat > pkg/app.py <<'EOF'\nimport sys\n\ndef main(argv):\n    return f\"{argv!r} $HOME `x`\"\nEOF\necho written";
    let (out, status) = run_in(&mut repo, script);
    assert_eq!((out.as_str(), status), ("written\n", Some(0)));
    assert_eq!(
        String::from_utf8(repo.read(&p("pkg/app.py")).unwrap()).unwrap(),
        "import sys\n\ndef main(argv):\n    return f\"{argv!r} $HOME `x`\"\n"
    );
    // Unquoted delimiters expand; `<<-` strips leading tabs.
    let (out, _) = run_in(&mut repo, "N=3; cat <<-END\n\tn=$N $((N+1)) \\$N\n\tEND");
    assert_eq!(out, "n=3 4 $N\n");
}

#[test]
fn syntax_errors_read_like_bash() {
    let cases: &[(&str, &str)] = &[
        (
            "echo 'x",
            "bash: unexpected EOF while looking for matching `''\n",
        ),
        (
            "echo \"x",
            "bash: unexpected EOF while looking for matching `\"'\n",
        ),
        ("ls |", "bash: syntax error: unexpected end of file\n"),
        ("; ls", "bash: syntax error near unexpected token `;'\n"),
        (
            "echo a && && b",
            "bash: syntax error near unexpected token `&&'\n",
        ),
        (
            "if true; then echo x",
            "bash: syntax error: unexpected end of file\n",
        ),
        ("echo )", "bash: syntax error near unexpected token `)'\n"),
        (
            "cat >",
            "bash: syntax error near unexpected token `newline'\n",
        ),
        (
            "echo ${x",
            "bash: unexpected EOF while looking for matching `}'\n",
        ),
        ("echo ${x!y}", "bash: ${x!y}: bad substitution\n"),
        (
            "case x in x) ;; esac",
            "bash: case: not supported by this shell\n",
        ),
    ];
    for (cmd, want) in cases {
        let mut repo = fixture();
        assert_eq!(run_in(&mut repo, cmd), (want.to_string(), Some(2)), "{cmd}");
    }
}

#[test]
fn runaway_loops_time_out() {
    let mut repo = fixture();
    let started = std::time::Instant::now();
    let out = VirtualShell::new().run(
        &mut repo,
        "echo start; while true; do :; done; echo never",
        Duration::from_millis(300),
    );
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert_eq!(out.output, "start\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    // A doubling variable is refused before it can exhaust memory; the loop then times out.
    let out = VirtualShell::new().run(
        &mut repo,
        "x=ab; while :; do x=\"$x$x\"; done",
        Duration::from_millis(500),
    );
    assert!(out.timed_out);
    assert!(
        out.output.starts_with("bash: expansion too large\n"),
        "{}",
        &out.output[..out.output.len().min(200)]
    );
    // Work that grows with the data (a sed loop appending to its line) is charged as it grows.
    let started = std::time::Instant::now();
    let out = VirtualShell::new().run(
        &mut repo,
        "echo x | sed ':a;s/x/xx/;ta'",
        Duration::from_millis(500),
    );
    assert!(out.timed_out);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn output_is_capped() {
    let mut repo = fixture();
    let out = VirtualShell::new().run(&mut repo, "seq 1 400000; echo done", TIMEOUT);
    assert_eq!(out.exit_code, Some(0));
    assert!(out.output.starts_with("1\n2\n3\n"));
    assert!(
        out.output
            .ends_with("\n[output truncated: more than 1 MiB]\n")
    );
    assert!(out.output.len() <= (1 << 20) + 64, "{}", out.output.len());
    // Pipes keep much more, so counting a long output stays right.
    assert_eq!(
        run_in(&mut repo, "seq 1 400000 | wc -l"),
        ("400000\n".into(), Some(0))
    );
}

/// Stands in for Pyodide: reports what it was given and writes a file.
struct FakePython;

impl PythonRunner for FakePython {
    fn run<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        cwd: &'a RepoPath,
        argv: &'a [String],
        io: &'a mut ProgramIo,
    ) -> LocalFuture<'a, i32> {
        let stdin = String::from_utf8_lossy(io.stdin()).into_owned();
        io.write_stdout(format!("cwd={cwd} argv={argv:?} stdin={stdin:?}\n").as_bytes());
        io.write_stderr(b"warning: fake\n");
        repo.write(&cwd.join("ran.txt").unwrap(), b"yes").unwrap();
        Box::pin(std::future::ready(3))
    }
}

#[test]
fn python_goes_to_the_runner_or_is_missing() {
    let mut repo = fixture();
    for (cmd, want) in [
        (
            "python3 -c 'print(1)'",
            "bash: python3: command not found\n",
        ),
        ("python x.py", "bash: python: command not found\n"),
        ("pytest -q", "bash: pytest: command not found\n"),
    ] {
        assert_eq!(
            run_in(&mut repo, cmd),
            (want.to_string(), Some(127)),
            "{cmd}"
        );
    }
    assert_eq!(run_in(&mut repo, "which python3"), (String::new(), Some(1)));

    let mut sh = VirtualShell::new().with_python(Box::new(FakePython));
    let out = sh.run(
        &mut repo,
        "cd src && echo data | python3 -m pytest -q 2>/dev/null",
        TIMEOUT,
    );
    assert_eq!(
        out.output,
        "cwd=src argv=[\"python3\", \"-m\", \"pytest\", \"-q\"] stdin=\"data\\n\"\n"
    );
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(repo.read(&p("src/ran.txt")).unwrap(), b"yes");
    let out = sh.run(
        &mut repo,
        "cd /repo; pytest 2>&1 | tr a-z A-Z; which python pytest",
        TIMEOUT,
    );
    assert_eq!(
        out.output,
        "CWD=. ARGV=[\"PYTEST\"] STDIN=\"\"\nWARNING: FAKE\n/usr/bin/python\n/usr/bin/pytest\n"
    );
    // A Python script run by path goes through the runner too.
    repo.write(&p("tool.py"), b"print('hi')\n").unwrap();
    let out = sh.run(&mut repo, "./tool.py a 2>&1", TIMEOUT);
    assert_eq!(
        out.output,
        "cwd=. argv=[\"python3\", \"./tool.py\", \"a\"] stdin=\"\"\nwarning: fake\n"
    );
}

#[test]
fn git_diff_and_status_come_from_the_baseline() {
    let mut repo = fixture();
    assert_eq!(
        run_in(&mut repo, "git status"),
        (
            "fatal: not a git repository (or any of the parent directories): .git\n".into(),
            Some(128)
        )
    );
    let mut sh =
        VirtualShell::new().with_version_control(Box::new(Baseline(repo.snapshot().unwrap())));
    let mut run = |repo: &mut VirtualRepo, cmd: &str| {
        let o = sh.run(repo, cmd, TIMEOUT);
        (o.output, o.exit_code)
    };
    assert_eq!(
        run(&mut repo, "git status"),
        (
            "On branch main\nnothing to commit, working tree clean\n".into(),
            Some(0)
        )
    );
    run(
        &mut repo,
        "sed -i 's/hello/bye/' src/main.py; echo new > new.txt; rm nums.txt",
    );
    assert_eq!(
        run(&mut repo, "git status --short"),
        (" D nums.txt\n M src/main.py\n?? new.txt\n".into(), Some(0))
    );
    assert_eq!(
        run(&mut repo, "cd src && git status -s"),
        (
            " D ../nums.txt\n M main.py\n?? ../new.txt\n".into(),
            Some(0)
        )
    );
    assert_eq!(
        run(&mut repo, "git status"),
        (
            "On branch main\n\
             Changes not staged for commit:\n  (use \"git add/rm <file>...\" to update what will be committed)\n  \
             (use \"git restore <file>...\" to discard changes in working directory)\n\
             \tdeleted:    ../nums.txt\n\tmodified:   main.py\n\n\
             Untracked files:\n  (use \"git add <file>...\" to include in what will be committed)\n\t../new.txt\n\n\
             no changes added to commit (use \"git add\" and/or \"git commit -a\")\n"
                .into(),
            Some(0)
        )
    );
    let (diff, status) = run(&mut repo, "git diff main.py");
    assert_eq!(status, Some(0));
    assert!(
        diff.starts_with("diff --git a/src/main.py b/src/main.py\n"),
        "{diff}"
    );
    assert!(diff.contains("+    print(\"bye\")\n"), "{diff}");
    assert!(!diff.contains("nums.txt"), "{diff}");
    assert_eq!(
        run(&mut repo, "git diff --name-only"),
        ("nums.txt\nsrc/main.py\n".into(), Some(0))
    );
    assert_eq!(
        run(&mut repo, "git diff --stat -- /repo/src"),
        (
            " src/main.py | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n".into(),
            Some(0)
        )
    );
    let (out, status) = run(&mut repo, "git log");
    assert_eq!(status, Some(1));
    assert!(
        out.starts_with("git: 'log' is not available in this shell"),
        "{out}"
    );
}

/// A small deterministic generator, so a failure names a reproducible input.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

#[test]
fn random_input_never_panics() {
    const PREFIXES: &[&str] = &[
        "",
        "echo ",
        "sed ",
        "sed -n ",
        "grep ",
        "grep -E ",
        "find . ",
        "printf ",
        "[[ ",
        "[ ",
        "test ",
        "echo $((",
        "tr ",
        "cut -f",
        "sort -k",
        "head -n ",
        "tail -c ",
        "ls ",
        "wc ",
        "diff ",
        "xargs ",
        "cat <<",
        "for x in ",
        "if ",
        "x=",
        "echo ${",
        "cd ",
        "mkdir -p ",
        "cp -r ",
        "mv ",
        "rm -rf ",
        "seq ",
        "uniq -c ",
        "git ",
        "bash -c ",
        "eval ",
    ];
    const PIECES: &[&str] = &[
        " ",
        " ",
        "a",
        "b",
        "1",
        "0",
        "-",
        "--",
        "*",
        "?",
        "[",
        "]",
        "{",
        "}",
        "(",
        ")",
        "$",
        "${",
        "$(",
        "`",
        "'",
        "\"",
        "\\",
        "|",
        "||",
        "&&",
        "&",
        ";",
        "\n",
        "<",
        ">",
        ">>",
        "2>&1",
        "<<",
        "#",
        "!",
        "~",
        "=",
        ",",
        "..",
        "/",
        "s/a/b/",
        "src",
        "notes.txt",
        "-r",
        "-n",
        "p",
        "d",
        "%s",
        "%",
        "EOF",
        "do",
        "done",
        "then",
        "fi",
        "+",
        "^",
        ".*",
        "\t",
    ];
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2500 {
        let mut cmd = rng.pick(PREFIXES).to_string();
        for _ in 0..(rng.next() % 24) {
            cmd.push_str(rng.pick(PIECES));
        }
        let mut repo = fixture();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            VirtualShell::new().run(&mut repo, &cmd, Duration::from_millis(50))
        }));
        assert!(result.is_ok(), "panicked on {cmd:?}");
    }
    // Valid commands with a few characters changed reach deeper into each command.
    for c in CASES {
        for _ in 0..12 {
            let mut chars: Vec<char> = c.cmd.chars().collect();
            for _ in 0..1 + rng.next() % 3 {
                let at = (rng.next() % (chars.len() as u64 + 1)) as usize;
                let piece: Vec<char> = rng.pick(PIECES).chars().collect();
                match rng.next() % 3 {
                    0 if at < chars.len() => {
                        chars.remove(at);
                    }
                    1 if at < chars.len() => {
                        chars.splice(at..at + 1, piece);
                    }
                    _ => {
                        chars.splice(at..at, piece);
                    }
                }
            }
            let cmd: String = chars.into_iter().collect();
            let mut repo = fixture();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                VirtualShell::new().run(&mut repo, &cmd, Duration::from_millis(50))
            }));
            assert!(result.is_ok(), "panicked on {cmd:?}");
        }
    }
    // Deep nesting is refused, not recursed into.
    for deep in [
        "$(".repeat(5000),
        "(".repeat(5000),
        "{ ".repeat(5000),
        format!("echo $(({}1", "(".repeat(5000)),
    ] {
        let mut repo = fixture();
        let out = VirtualShell::new().run(&mut repo, &deep, TIMEOUT);
        assert_eq!(out.exit_code, Some(2), "{}", &deep[..10]);
    }
    for deep in [
        format!("find . {} -print", "! ".repeat(100_000)),
        format!("[ {} x ]", "! ".repeat(100_000)),
        format!("echo {}a{}", "{a,".repeat(5000), "}".repeat(5000)),
    ] {
        let mut repo = fixture();
        let out = VirtualShell::new().run(&mut repo, &deep, TIMEOUT);
        assert!(out.exit_code.is_some(), "{}", &deep[..20]);
    }
}

/// The in-memory repository's size limit reaches the shell's commands: a redirection past it
/// fails with the repository's error, as on a full disk.
#[test]
fn commands_meet_the_repository_size_limit() {
    let mut r = VirtualRepo::new("/repo").with_max_bytes(1000);
    let mut shell = VirtualShell::new();
    let out = shell.run(
        &mut r,
        "seq 1 1000 > numbers.txt; echo status $?",
        std::time::Duration::from_secs(5),
    );
    assert!(out.output.contains("more than its limit"), "{out:?}");
    // As on a full disk, the redirection made the file before the write failed.
    assert_eq!(r.read(&RepoPath::new("numbers.txt").unwrap()).unwrap(), b"");
}

/// Stands in for a Python host with a time limit: it is told the command's time left, and runs
/// until then (as Pyodide does before its deadline interrupts the program), then says so.
struct LimitedPython {
    told: std::rc::Rc<std::cell::RefCell<Vec<Duration>>>,
}

impl PythonRunner for LimitedPython {
    fn run<'a>(
        &'a mut self,
        _repo: &'a mut dyn Repository,
        _cwd: &'a RepoPath,
        _argv: &'a [String],
        io: &'a mut ProgramIo,
    ) -> LocalFuture<'a, i32> {
        let left = io.time_left().expect("a command always has a time limit");
        self.told.borrow_mut().push(left);
        std::thread::sleep(left + Duration::from_millis(5));
        io.write_stderr(b"python3: stopped at the command's time limit\n");
        Box::pin(std::future::ready(124))
    }
}

#[test]
fn python_gets_the_time_left_and_its_stop_times_the_command_out() {
    let mut repo = fixture();
    let told = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut sh = VirtualShell::new().with_python(Box::new(LimitedPython { told: told.clone() }));
    let out = sh.run(
        &mut repo,
        "echo before; python3 -c 'while True: pass'; echo after",
        Duration::from_millis(400),
    );
    let left = told.borrow()[0];
    assert!(
        left <= Duration::from_millis(400) && left > Duration::from_millis(200),
        "{left:?}"
    );
    assert!(out.output.starts_with("before\n"), "{out:?}");
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(
        !out.output.contains("after"),
        "the command ends with the program: {out:?}"
    );
    assert!(
        out.output.contains("stopped at the command's time limit"),
        "{out:?}"
    );
}

/// Stands in for Pyodide in a worker: each run answers only after the caller has waited once
/// (a pending future), then prints its arguments and writes `ran-N.txt`.
struct LaterPython {
    runs: usize,
}

/// Ready on its second poll.
struct WaitOnce(bool);

impl std::future::Future for WaitOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

impl PythonRunner for LaterPython {
    fn run<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        cwd: &'a RepoPath,
        argv: &'a [String],
        io: &'a mut ProgramIo,
    ) -> LocalFuture<'a, i32> {
        Box::pin(async move {
            WaitOnce(false).await;
            self.runs += 1;
            io.write_stdout(format!("{}\n", argv[1..].join(" ")).as_bytes());
            let file = cwd.join(&format!("ran-{}.txt", self.runs)).unwrap();
            repo.write(&file, b"").unwrap();
            0
        })
    }
}

/// Polls `future` to its end on this thread (it wakes itself when it waits).
fn wait<T>(future: LocalFuture<'_, T>) -> T {
    let mut future = future;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[test]
fn python_that_answers_later_runs_wherever_a_command_can_run() {
    let mut repo = fixture();
    let mut sh = VirtualShell::new().with_python(Box::new(LaterPython { runs: 0 }));
    let script = "echo 'python3 from-source' > s.sh; \
        for i in 1 2; do echo \"[$(python3 subst $i)]\" | tr a-z A-Z; done; \
        timeout 5 python3 timeout && bash -c 'python3 bash-c' || echo unreachable; \
        env X=1 python3 env; time python3 time 2>/dev/null; command python3 command; \
        eval 'python3 eval'; source s.sh; echo xargs | xargs python3; \
        find . -name s.sh -exec python3 find {} \\; ; \
        if python3 cond; then python3 then > out.txt; fi; cat out.txt";
    let out = wait(sh.run_async(&mut repo, script, TIMEOUT));
    assert_eq!(
        out.output,
        "[SUBST 1]\n[SUBST 2]\ntimeout\nbash-c\nenv\ntime\ncommand\neval\nfrom-source\nxargs\n\
         find ./s.sh\ncond\nthen\n"
    );
    assert_eq!(out.exit_code, Some(0));
    // Every run wrote its file, in order.
    for n in 1..=13 {
        let name = format!("ran-{n}.txt");
        assert!(repo.read(&p(&name)).is_ok(), "{name}");
    }

    // Run to its end at once, such a runner cannot answer: the command says so.
    let out = sh.run(&mut repo, "python3 -c 1", TIMEOUT);
    assert_eq!(out.exit_code, Some(1));
    assert!(out.output.contains("Shell::run_async"), "{}", out.output);
}
