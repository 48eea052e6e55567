# wal_sizes.tcl — records or replays what `file size` says about -wal files.
#
# Prepended to a test file by tclsuite.py (RunOptions) to prove the wal-size
# group of expected-differences.txt: run the file on stock SQLite recording
# every `file size X-wal` answer, then run it through waldio with those
# answers replayed in the same order. A case that fails through waldio and
# passes with stock's -wal sizes differs from stock in the -wal size only.
#
#   WALDIO_TEST_SIZE_LOG=path     record: append "rc<TAB>path<TAB>value" per call
#   WALDIO_TEST_SIZE_REPLAY=path  replay: answer each call from the next record
#
# A call whose path is not the recorded one (the script took another branch)
# ends the replay: that call and every later one get the real answer, and
# "waldio-replay: diverged at call N ..." is printed once.
if {[llength [info commands ::waldio_real_file]]==0} {
  set ::waldio_sizes(n) 0
  set ::waldio_sizes(diverged) 0
  if {[info exists ::env(WALDIO_TEST_SIZE_REPLAY)]} {
    set ::waldio_sizes(mode) replay
    set fd [open $::env(WALDIO_TEST_SIZE_REPLAY)]
    set ::waldio_sizes(records) [split [string trimright [read $fd] "\n"] "\n"]
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
    set i $S(n)
    incr S(n)
    if {$S(mode) eq "record"} {
      puts $S(log) [join [list $rc $path [string map {"\n" " "} $value]] "\t"]
      return [list $rc $value]
    }
    if {$S(diverged)} { return [list $rc $value] }
    set rec [split [lindex $S(records) $i] "\t"]
    if {[llength $rec]!=3 || [lindex $rec 1] ne $path} {
      set S(diverged) 1
      puts "waldio-replay: diverged at call $i: $path (stock: [lindex $rec 1])"
      return [list $rc $value]
    }
    return [list [lindex $rec 0] [lindex $rec 2]]
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
}
