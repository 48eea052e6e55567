# wal_sizes.tcl — records or replays what `file size` says about -wal files.
#
# Prepended to a test file by tclsuite.py (RunOptions) to prove the wal-size
# group of expected-differences.txt: run the file on stock SQLite recording
# every `file size X-wal` answer, then run it through waldio with those
# answers replayed. A case that fails through waldio and prints what stock
# prints with stock's -wal sizes differs from stock in the -wal size only.
#
#   WALDIO_TEST_SIZE_LOG=path     record: "case<TAB>path<TAB>n<TAB>rc<TAB>value"
#   WALDIO_TEST_SIZE_REPLAY=path  replay: answer from the record
#
# A call is identified by the test case it belongs to (the last do_test
# started), its path and its number among that case's calls of that path, so
# that a failed case that skipped some calls does not shift the answers of
# the cases after it. A call the record does not have (the script took
# another branch) gets the real answer, and "waldio-replay: diverged at ..."
# is printed once.
if {[llength [info commands ::waldio_real_file]]==0} {
  array set ::waldio_sizes {case {} diverged 0}
  if {[info exists ::env(WALDIO_TEST_SIZE_REPLAY)]} {
    set ::waldio_sizes(mode) replay
    set fd [open $::env(WALDIO_TEST_SIZE_REPLAY)]
    foreach line [split [string trimright [read $fd] "\n"] "\n"] {
      set f [split $line "\t"]
      set ::waldio_answer([lrange $f 0 2]) [lrange $f 3 4]
    }
    close $fd
  } elseif {[info exists ::env(WALDIO_TEST_SIZE_LOG)]} {
    set ::waldio_sizes(mode) record
    set ::waldio_sizes(log) [open $::env(WALDIO_TEST_SIZE_LOG) a]
    fconfigure $::waldio_sizes(log) -buffering line
  } else {
    error "wal_sizes.tcl: set WALDIO_TEST_SIZE_LOG or WALDIO_TEST_SIZE_REPLAY"
  }

  # The answer to `file size $path`, given the real one (rc 0 or 1, value).
  proc ::waldio_wal_size {path rc value} {
    upvar #0 ::waldio_sizes S
    set key [list $S(case) $path [incr S(n,$S(case),$path)]]
    if {$S(mode) eq "record"} {
      puts $S(log) [join [concat $key [list $rc [string map {"\n" " "} $value]]] "\t"]
      return [list $rc $value]
    }
    if {[info exists ::waldio_answer($key)]} {
      return $::waldio_answer($key)
    }
    if {!$S(diverged)} {
      set S(diverged) 1
      puts "waldio-replay: diverged at $key: stock never asked"
    }
    return [list $rc $value]
  }

  rename ::file ::waldio_real_file
  proc ::file {args} {
    if {[llength $args]!=2 || [lindex $args 0] ne "size"
     || ![string match *-wal [lindex $args 1]]} {
      return [uplevel 1 [list ::waldio_real_file {*}$args]]
    }
    set rc [catch {::waldio_real_file size [lindex $args 1]} value]
    lassign [::waldio_wal_size [lindex $args 1] $rc $value] rc value
    return -code $rc $value
  }

  # do_test (tester.tcl) names the case each call belongs to.
  rename ::source ::waldio_real_source
  proc ::source {args} {
    set r [uplevel 1 [list ::waldio_real_source {*}$args]]
    if {[string match *tester.tcl [lindex $args end]]
     && [llength [info commands ::waldio_real_do_test]]==0} {
      rename ::do_test ::waldio_real_do_test
      proc ::do_test {name cmd expected} {
        set ::waldio_sizes(case) $name
        uplevel 1 [list ::waldio_real_do_test $name $cmd $expected]
      }
    }
    return $r
  }
}
