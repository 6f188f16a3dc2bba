#!/bin/sh
# SPDX-License-Identifier: MIT
# A cron job that sends notifications, throttled by divvyd: at most what the rules allow per
# user (e.g. one birthday card per user per year), whatever the job's schedule.
#
# Rules (divvyd.rules(5)), e.g.:
#   [kind=birthday-card user=*]
#   creditLimit = 1
#   resetSeconds = 31536000
#   actorField = user
#
# Input: one "USER EMAIL" per line on stdin (the users due today). crontab, with this script
# copied to /usr/local/bin (the packages do not install it):
#   0 9 * * *  list-birthdays | /usr/local/bin/divvy-cron.sh
set -u

# divvy's exit status: 0 allowed, 1 denied, 2 error (the daemon is down, a bad value, ...).
status=0
while read -r user email; do
        [ -n "$user" ] || continue
        divvy hit --quiet --timeout 2 kind=birthday-card user="$user"
        case $? in
        0) echo "sending a birthday card to $user <$email>" ;;  # replace with the real mailer
        1) echo "skipping $user: already sent one this year" ;;
        *) echo "divvyd unavailable, not sending to $user" >&2; status=1 ;;  # fail closed
        esac
done
exit $status
